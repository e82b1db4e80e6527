"""Training: the embedded pair (`zoo`), the real target's draft model (`draft`) and EAGLE-3 head (`eagle3`,
`eagle3_build`; its training and held-out sources in `head_data`; `--resume` adds a stage), and LoRA distillation
(`distill`, `lora`, `job`, `evaluate`); every command's settings in `config`, which imports no torch.
"""
