"""Stage 5-6: build options, rows dispatch, Parquet writing, build, manifest, card, verify, publish and loading."""
