"""Recipes built on tfspec: the data, tokenizers and training runs behind shipped models.

`tfspec` never imports a recipe; a recipe imports `tfspec`.
"""
