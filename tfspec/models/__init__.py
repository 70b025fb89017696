"""Decodable models: each implements `tfspec.models.protocol.DecodeModel`."""

from tfspec.models.feature_draft import FeatureDraft, FeatureDraftConfig
from tfspec.models.medusa import MedusaConfig, MedusaHeads
from tfspec.models.t5 import T5
from tfspec.models.t5_config import T5Config
from tfspec.models.ngram import NGram
from tfspec.models.prompt_lookup import PromptLookup
