"""Strategies for running `generate` on several devices (TPU cores, GPUs, CPU devices).

Rows are independent (per-row lengths, per-row random streams keyed by row key), so data
parallelism is exact: each replica decodes a slice of the batch and the slices are joined.
Models with variables (T5) must be created inside `strategy.scope()`: each replica then reads
its own copy of the weights on its own device, which XLA requires (a compiled program cannot
read a variable placed on another device). `check_placement` enforces it with a clear error.
"""

import weakref
from typing import Callable, Optional, Sequence

import numpy as np
import tensorflow as tf


def resolve_strategy(tpu: Optional[str] = None) -> tf.distribute.Strategy:
    """Picks a strategy for this machine.

    Args:
      tpu: a TPU name or address, or "local" on a Cloud TPU VM; None picks from local devices.

    Returns:
      `TPUStrategy` when `tpu` is given, `MirroredStrategy` over several GPUs,
      `OneDeviceStrategy` on one GPU, else the default strategy (CPU).
    """
    if tpu:
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except (ValueError, tf.errors.OpError) as e:
            first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ValueError(f"cannot connect to TPU {tpu!r}: {first_line}. On a Cloud TPU VM "
                             f"pass --tpu local; elsewhere the TPU name or grpc:// address")
        return tf.distribute.TPUStrategy(resolver)
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy()
    if len(gpus) == 1:
        return tf.distribute.OneDeviceStrategy(gpus[0].name)
    return tf.distribute.get_strategy()


def check_placement(strategy: tf.distribute.Strategy, model, role: str) -> None:
    """Raises ValueError if `model`'s variables were created outside `strategy.scope()`."""
    variables = list(getattr(model, "weights", None) or [])
    if not variables:  # NGram, PromptLookup: constants only, nothing to place.
        return
    variable = getattr(variables[0], "value", variables[0])  # Keras wraps a tf.Variable.
    if not strategy.extended.variable_created_in_scope(variable):
        raise ValueError(
            f"the {role} model was created outside strategy.scope(); create it inside "
            f"`with strategy.scope():` (tfspec.load_model or tfspec.models.T5) so every "
            f"replica reads its own copy of the weights")


# {fn: {id(strategy): (strategy, step)}}, fn a weak key: `step` calls `fn` through a weak
# reference, so dropping the compiled loop (with its model) frees its replicated step too.
_REPLICATED: "weakref.WeakKeyDictionary[Callable, dict]" = weakref.WeakKeyDictionary()


def _replicated(strategy: tf.distribute.Strategy, fn: Callable) -> Callable:
    """`strategy.run(fn)` inside one tf.function, cached per (strategy, fn).

    Calling `strategy.run` eagerly makes every replica thread trace `fn` on its own, which
    can deadlock on the tracing lock; inside a tf.function the replicas are traced in one
    graph (the pattern TensorFlow documents for custom loops).
    """
    per_fn = _REPLICATED.setdefault(fn, {})
    if id(strategy) not in per_fn:
        fn_ref = weakref.ref(fn)

        @tf.function(autograph=False)  # Plain Python control flow: nothing to convert.
        def step(values, shared):
            return strategy.run(lambda v: fn_ref()(*v, shared), args=(values,))
        per_fn[id(strategy)] = (strategy, step)  # Holding the strategy keeps its id valid.
    return per_fn[id(strategy)][1]


def run_split(strategy: tf.distribute.Strategy, fn: Callable,
              batched: Sequence[tf.Tensor], shared: tf.Tensor) -> dict:
    """Runs `fn(*batched_slice, shared)` on every replica and joins the results by row.

    Args:
      strategy: the strategy.
      fn: returns a dict of tensors whose first axis is the batch.
      batched: tensors whose first axis is the batch, split across replicas.
      shared: a tensor every replica receives whole (the seed).

    Returns:
      dict of numpy arrays, rows in the original order.
    """
    replicas = strategy.num_replicas_in_sync
    batch = int(batched[0].shape[0])
    per_replica = -(-batch // replicas)
    # Pad to equal slices by repeating the last row; the copies are dropped afterwards and,
    # because rows never interact, cannot change any real row.
    pad = per_replica * replicas - batch
    arrays = [np.concatenate([t.numpy(), np.repeat(t.numpy()[-1:], pad, axis=0)], axis=0)
              for t in batched]

    def slice_for(context):
        i = context.replica_id_in_sync_group
        return tuple(tf.constant(a[i * per_replica:(i + 1) * per_replica]) for a in arrays)

    values = strategy.experimental_distribute_values_from_function(slice_for)
    outputs = _replicated(strategy, fn)(values, shared)
    parts = strategy.experimental_local_results(outputs)
    joined = {name: np.concatenate([part[name].numpy() for part in parts], axis=0)[:batch]
              for name in parts[0]}
    return joined
