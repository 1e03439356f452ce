"""Print a command of README.md as written, for CI to run it (so CI runs what a newcomer types).

python .ci/readme_command.py install "without a GPU"   # the install-and-run line of that machine
python .ci/readme_command.py test                      # the test command
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def install(machine: str, text: str) -> str:
    """The command cell of the Install table's row for ``machine``."""
    rows = re.findall(r"^\| (.+?) \| `(.+)` \|$", section(text, "Install and run"), flags=re.M)
    commands = {name: command for name, command in rows}
    if machine not in commands:
        raise SystemExit(f"README.md's install table has no row {machine!r}; rows: {', '.join(commands)}")
    return commands[machine]


def test(text: str) -> str:
    (command,) = re.findall(r"```bash\n(.+?)\n```", section(text, "Test"), flags=re.S)
    return command


if __name__ == "__main__":
    text = README.read_text()
    print(install(sys.argv[2], text) if sys.argv[1] == "install" else test(text))
