"""The market engine: convex cost models and the Bounded-Price Mechanism.

Pure domain code: standard library, NumPy and SciPy only. The live agents, the service and the
what-if Spark job all run these same decisions.
"""
