"""Everything that runs on Spark: fragments, the fragment runtime, the what-if job."""
