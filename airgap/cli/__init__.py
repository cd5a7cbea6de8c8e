"""The ``airgap`` command line: a thin edge over the library.

``app`` holds the command group and the one place that maps typed errors to exit codes
and one-line messages; ``options`` the flags several commands share; each other module
holds one family of commands. Importing the package registers every command.

Layer 11: may import every package.
"""

from airgap.cli import bundlecmds, importcmds, prunecmd, servecmd, verifycmd
from airgap.cli.app import cli, leave, main

__all__ = ["bundlecmds", "cli", "importcmds", "leave", "main", "prunecmd", "servecmd", "verifycmd"]
