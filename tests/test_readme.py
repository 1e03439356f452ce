"""README's "Use the framework" example runs as written, here on whatever device there is."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_use_the_framework_runs_as_written(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Use the framework", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "(64, 10)" in done.stdout


def test_ci_runs_the_readme_commands_as_written() -> None:
    """.ci/run takes the no-GPU install line and the test command from README.md, so CI runs what a
    newcomer types; both are read here as CI reads them."""
    sys.path.insert(0, str(ROOT / ".ci"))
    try:
        import readme_command
    finally:
        sys.path.pop(0)
    readme = (ROOT / "README.md").read_text()
    install = readme_command.install("without a GPU", readme)
    assert install.startswith("pip install -e '.[") and "triton" not in install and "grade" not in install, install
    assert readme_command.test(readme) == "python -m pytest -q"
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'readme_command.py install "without a GPU"' in ci and "readme_command.py test" in ci
    assert ci.index('eval "$install"') < ci.index('eval "$test_command"') < ci.index("pip install -q -e '.[grade]'")
