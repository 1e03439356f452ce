"""The command lines' parser: an error is one line (``minitorch-cuda train: error: ...``) and exit
status 2, with ``--help`` for the usage, instead of argparse's usage block before the error."""

from __future__ import annotations

import argparse


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")
