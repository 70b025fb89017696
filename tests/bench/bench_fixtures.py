"""Tiny random models shared by the benchmark tests."""

TINY = "random:t5-small:vocab_size=64,d_model=32,d_kv=8,d_ff=64,num_layers=1,num_heads=2"
TINY_DRAFT = "random:t5-small:vocab_size=64,d_model=16,d_kv=8,d_ff=32,num_layers=1,num_heads=2"

CONTRACT_KEYS = ("ar_ms_per_token", "spec_ms_per_token", "speedup", "acceptance_rate",
                 "beta_mean", "draft_cost_ratio", "predicted_speedup",
                 "speedup_over_predicted")
