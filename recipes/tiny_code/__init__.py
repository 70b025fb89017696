"""The recipe of the embedded default pair (`zoo:tiny-code-target` / `zoo:tiny-code-draft`).

Modules, in the order the data flows:

- `extraction`: documented functions mined with `ast` from Python sources.
- `decontamination`: HumanEval overlap detection (the pair is evaluated on HumanEval).
- `corpus`: filtering, decontamination, dedup, splits and the on-disk cache
  (`build_corpus`; `python -m recipes.tiny_code.corpus`).
- `tokenizer_training`: the lossless SentencePiece tokenizer shipped in `tfspec/zoo/assets/`
  (`python -m recipes.tiny_code.tokenizer_training`).
- `data`: the corpus tokenized into the training examples of `tfspec.training`.
- `train`: the command line, `python -m recipes.tiny_code.train --config
  configs/zoo_tiny_code.py --stage all`.
"""
