"""What a run leaves on disk: file names, finding them, and the typed models with their load and save. Torch-free."""
