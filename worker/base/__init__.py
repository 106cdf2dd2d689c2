"""What every stage shares: the typed objects the stages pass on, and small helpers.
Imports nothing from the stages."""
