"""Training: the embedded pair (zoo) and draft distillation (distill, lora, job, evaluate)."""
