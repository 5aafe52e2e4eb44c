"""What goes out: Hub-ready folders (remote code, safetensors, tokenizer, model card), pushing them, and converting
the published reference checkpoints to this package's format."""
