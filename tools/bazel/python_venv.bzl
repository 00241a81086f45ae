"""The repository's virtualenv as Bazel's Python toolchain (WORKSPACE).

`venv_python` is a local repository rule: it downloads nothing. It writes a
py_runtime whose interpreter is `<workspace>/.venv/bin/python` (made by
`make setup`), and a toolchain that WORKSPACE registers, so every py_binary and
py_test runs under that interpreter, with the venv's site-packages (TensorFlow,
TFF, numpy, scipy, dp_accounting, pytest) on its path. Third-party imports
therefore need no Bazel targets: BUILD's deps name only first-party targets.
The launcher stub's shebang is the same interpreter, so no `python` on PATH is
needed either.
"""

_BUILD = """\
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

py_runtime(
    name = "venv_py3",
    interpreter_path = "{python}",
    python_version = "PY3",
    stub_shebang = "#!{python}",
)

py_runtime_pair(
    name = "venv_pair",
    py3_runtime = ":venv_py3",
)

toolchain(
    name = "toolchain",
    toolchain = ":venv_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
"""

def _venv_python_impl(ctx):
    workspace = ctx.path(Label("//:WORKSPACE")).dirname
    python = workspace
    for part in ctx.attr.venv.split("/") + ["bin", "python"]:
        python = python.get_child(part)
    if not python.exists:
        fail("{} does not exist: run `make setup` first (it makes the venv " +
             "with every third-party package the targets import).".format(python))
    ctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(ctx.name))
    ctx.file("BUILD", _BUILD.format(python = python))

venv_python = repository_rule(
    implementation = _venv_python_impl,
    attrs = {"venv": attr.string(default = ".venv", doc = "The virtualenv's folder, relative to the workspace.")},
    local = True,
)
