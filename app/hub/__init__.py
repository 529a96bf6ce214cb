"""Models on disk and on the Hugging Face Hub."""
