"""``airgap installer``: airgap itself, with every wheel it needs, for a host without a
package index. See docs/installer.md.

Layer 5: may import layers 0-4.
"""
