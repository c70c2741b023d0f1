"""The maintenance control plane: plan from health figures, then run Iceberg's own procedures."""
