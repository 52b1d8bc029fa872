"""The capacity planner's what-if analysis: federations simulated in batch on Spark."""
