"""What goes in: tokenizers, datasets and collators."""
