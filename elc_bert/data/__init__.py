"""What goes in: tokenizers, corpora, packed samples, pretraining batches and collators."""
