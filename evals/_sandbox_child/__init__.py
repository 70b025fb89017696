"""The process side of `evals.sandbox`: run one untrusted program and check it.

The folder is run as a script (`python -I evals/_sandbox_child RESULT_FD TAG`, see
`__main__`) and uses the standard library only. Three processes take part in one check:
the trusted **checker** (`checker`), which runs the tests; **init** and the untrusted
**candidate** (`candidate`), inside the namespaces, cgroup, rlimits and syscall filter of
`isolation` and `seccomp`. They exchange frames of plain values (`codec`), which
`evals.sandbox` imports too.
"""
