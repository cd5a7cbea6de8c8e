"""airgap.configmaps."""
