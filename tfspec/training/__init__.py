"""Training T5 targets and distilled drafts (used by `python -m recipes.tiny_code.train`).

Modules: `examples` (tokenized multitask examples, fixed-shape bucketed batches), `losses`
(label cross-entropy), `distill` (the draft's KL-to-target loss), `optim` (AdamW + warm-up
schedules), `trainer` (the resumable loop), `stages` (target, draft), `export` (zoo export,
acceptance measurement, model cards).
"""
