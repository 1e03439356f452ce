"""Launch and download links for the chapters and their exercise notebooks.

- The theme's Colab button points at the page's source, a MyST-markdown file
  Colab cannot open; here it points at the page's .ipynb copy in
  ``book/notebooks/`` (``python -m minitorch_cuda.book.notebooks``).
- The role ``{exercise-notebook}`06_opt1_memcopies``` writes one line of links
  for a chapter's exercise notebook: download the .ipynb, open it in Colab, open
  it on Binder.
- The built book carries ``book/notebooks/`` as ``notebooks/``, with every
  exercise notebook in one ``notebooks/exercises.zip``.
- sphinx-thebe (which the launch buttons bring) declares ``const THEBE_JS_URL``
  in an inline script that Sphinx 7.4 writes twice into every page (it adds the
  script once as ``None`` and once as ``''`` and takes them for two), so every
  page threw "Identifier 'THEBE_JS_URL' has already been declared"; each page
  here keeps one copy of every script.
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path
from urllib.parse import quote

from docutils import nodes

NOTEBOOKS = "book/notebooks"


def _repo(config) -> tuple[str, str, str] | None:
    """(org/repo, branch, repository url) from html_theme_options, as the theme reads them."""
    options = config.html_theme_options
    url = options.get("repository_url", "").rstrip("/")
    if not url.startswith("https://github.com/"):
        return None
    return url.removeprefix("https://github.com/"), options.get("repository_branch", "main"), url


def _colab(config, path: str) -> str | None:
    repo = _repo(config)
    colab = config.html_theme_options.get("launch_buttons", {}).get("colab_url", "").rstrip("/")
    if repo is None or not colab:
        return None
    return f"{colab}/github/{repo[0]}/blob/{repo[1]}/{path}"


def _binder(config, path: str) -> str | None:
    repo = _repo(config)
    binder = config.html_theme_options.get("launch_buttons", {}).get("binderhub_url", "").rstrip("/")
    if repo is None or not binder:
        return None
    return f"{binder}/v2/gh/{repo[0]}/{repo[1]}?urlpath={quote('lab/tree/' + path, safe='')}"


def point_colab_at_ipynb(app, pagename, templatename, context, doctree):
    if not pagename.startswith("chapters/"):
        return
    url = _colab(app.config, f"{NOTEBOOKS}/{pagename}.ipynb")
    for group in context.get("header_buttons", []):
        if group.get("label") == "launch-buttons":
            for button in group.get("buttons", []):
                if button.get("text") == "Colab" and url:
                    button["url"] = url


def one_copy_of_each_script(app, pagename, templatename, context, doctree):
    seen, scripts = set(), []
    for script in context.get("script_files", []):
        key = (script.filename or "", tuple(sorted(script.attributes.items())))
        if key not in seen:
            seen.add(key)
            scripts.append(script)
    context["script_files"] = scripts


def exercise_notebook_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{exercise-notebook}`NN_name``: download, Colab and Binder links for exercises/NN_name."""
    env = inliner.document.settings.env
    stem = text.strip()
    if not (Path(env.srcdir) / "exercises" / f"{stem}.md").exists():
        msg = inliner.reporter.error(f"no exercise notebook exercises/{stem}.md", line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    depth = env.docname.count("/")
    local = "../" * depth + f"notebooks/exercises/{stem}.ipynb"
    links = [("download the notebook (.ipynb)", local)]
    colab = _colab(env.config, f"{NOTEBOOKS}/exercises/{stem}.ipynb")
    binder = _binder(env.config, f"exercises/{stem}.md")
    links += [(label, url) for label, url in (("open in Colab", colab), ("open on Binder", binder)) if url]
    out: list[nodes.Node] = [nodes.literal(text=f"exercises/{stem}.md"), nodes.Text(": ")]
    for i, (label, url) in enumerate(links):
        if i:
            out.append(nodes.Text(" · "))
        out.append(nodes.reference(label, label, refuri=url, classes=["exercise-notebook-link"]))
    return out, []


def copy_notebooks(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    source = Path(app.srcdir) / NOTEBOOKS
    if not source.is_dir():
        return
    target = Path(app.outdir) / "notebooks"
    shutil.copytree(source, target, dirs_exist_ok=True)
    with zipfile.ZipFile(target / "exercises.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        for notebook in sorted((source / "exercises").glob("*.ipynb")):
            archive.write(notebook, f"minitorch-cuda-exercises/{notebook.name}")


def setup(app):
    app.connect("html-page-context", point_colab_at_ipynb, priority=600)
    app.connect("html-page-context", one_copy_of_each_script)
    app.add_role("exercise-notebook", exercise_notebook_role)
    app.connect("build-finished", copy_notebooks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
