"""Model weights and model helpers: locating packaged files, embeddings."""
