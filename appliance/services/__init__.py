"""Business rules, one module per resource. Nothing here imports Bottle."""
