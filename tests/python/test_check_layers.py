"""scripts/check-layers on this checkout (it holds) and on copies of it with a violation planted: an
upward include, an include into a folder its layer may not use (also spelled through "..", or split
by a line continuation), a version seam crossed, a folder
that LAYERS does not know, a README that says otherwise, a cycle in LAYERS, and LAYERS malformed."""
import os
import shutil
import subprocess
import sys

import pytest

from build_paths import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "check-layers")


def layer_folders(root):
    folders = []
    with open(os.path.join(root, "LAYERS"), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith(("seam ", "python ")) and ":" in line:
                folders.append(line.split(":", 1)[0].strip())
    return folders


def python_packages(root):
    with open(os.path.join(root, "LAYERS"), encoding="utf-8") as f:
        return [line.split(":", 1)[0].split()[1] for line in f if line.startswith("python ")]


def copy_python_packages(root, to):
    """The .py files of the Python packages LAYERS lists, into `to` (beside whatever is there)."""
    def not_python(directory, names):
        return [n for n in names if n == "__pycache__" or
                (not n.endswith(".py") and not os.path.isdir(os.path.join(directory, n)))]
    for package in python_packages(root):
        shutil.copytree(os.path.join(root, package), to / package, dirs_exist_ok=True, ignore=not_python)


@pytest.fixture
def tree(tmp_path):
    """A copy of the checkout's C++ folders, their READMEs, the Python packages and LAYERS."""
    shutil.copy(os.path.join(ROOT, "LAYERS"), tmp_path / "LAYERS")
    keep = shutil.ignore_patterns("__pycache__", "*.py", "*.json", "*.png", "*.html", "*.pt")
    for folder in layer_folders(ROOT):
        shutil.copytree(os.path.join(ROOT, folder), tmp_path / folder, ignore=keep)
    copy_python_packages(ROOT, tmp_path)
    return tmp_path


def check(root):
    return subprocess.run([sys.executable, SCRIPT, str(root)], capture_output=True, text=True)


def append(path, text):
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


def test_this_checkout_follows_its_layers():
    r = check(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == ""


def test_the_copy_follows_them_too(tree):
    r = check(tree)
    assert r.returncode == 0, r.stdout + r.stderr


def test_an_include_that_reaches_up_a_layer_fails_naming_file_and_line(tree):
    header = tree / "devices" / "device_set.h"
    lines = header.read_text().count("\n")
    append(header, '#include "run/runner.h"\n')
    r = check(tree)
    assert r.returncode == 1
    assert f'devices/device_set.h:{lines + 1}: devices/ may not include "run/runner.h"' in r.stdout
    assert "1 violation(s)" in r.stderr


def test_the_harness_sees_the_strategy_interface_and_no_strategy_behind_it(tree):
    source = tree / "run" / "parity.cpp"
    append(source, '#include "strategies/strategy.h"\n')
    assert check(tree).returncode == 0
    append(source, '#include "strategies/data_parallel.h"\n')
    r = check(tree)
    assert r.returncode == 1
    assert 'run/ may not include "strategies/data_parallel.h"' in r.stdout


def test_a_view_may_not_reach_into_the_run(tree):
    append(tree / "views" / "progress.cpp", '#include "run/runner.h"\n')
    r = check(tree)
    assert r.returncode == 1
    assert 'views/ may not include "run/runner.h"' in r.stdout


def test_a_relative_include_is_refused(tree):
    append(tree / "run" / "runner.cpp", '#include "sampling.h"\n')
    r = check(tree)
    assert r.returncode == 1
    assert '#include "sampling.h" is not a file of the project named from the repository root' in r.stdout


def test_an_include_is_judged_where_its_dots_lead(tree):
    # Issue 43 item 10: "base/../cli/cli.h" lies under base/ as spelled, and is cli/cli.h as included.
    source = tree / "base" / "stats.cpp"
    lines = source.read_text().count("\n")
    append(source, '#include "base/../cli/cli.h"\n')
    r = check(tree)
    assert r.returncode == 1
    assert (f'base/stats.cpp:{lines + 1}: base/ may not include "base/../cli/cli.h" (that is, "cli/cli.h")'
            in r.stdout)


def test_an_include_that_climbs_out_of_the_checkout_is_refused(tree):
    append(tree / "base" / "stats.cpp", '#include "../base/stats.h"\n')
    r = check(tree)
    assert r.returncode == 1
    assert 'is not a file of the project named from the repository root' in r.stdout


def test_an_include_split_by_a_line_continuation_is_one_include(tree):
    # The preprocessor splices a line that ends in a backslash with the next before it reads
    # directives; so does the check, and it reports the directive's first line.
    source = tree / "devices" / "device_set.cpp"
    lines = source.read_text().count("\n")
    append(source, '#include \\\n  "run/runner.h"\n#inc\\\nlude "views/explain.h"\n')
    r = check(tree)
    assert r.returncode == 1
    assert f'devices/device_set.cpp:{lines + 1}: devices/ may not include "run/runner.h"' in r.stdout
    assert f'devices/device_set.cpp:{lines + 3}: devices/ may not include "views/explain.h"' in r.stdout


def test_the_version_seam_stays_in_compat(tree):
    append(tree / "devices" / "precision.cpp", "#if TORCH_VERSION_MAJOR >= 2\n#endif\n")
    r = check(tree)
    assert r.returncode == 1
    assert "TORCH_VERSION is a version seam: only compat/ may use it" in r.stdout


def test_a_folder_that_layers_does_not_know_fails(tree):
    os.makedirs(tree / "sharded")
    (tree / "sharded" / "zero.cpp").write_text('#include "base/errors.h"\n')
    r = check(tree)
    assert r.returncode == 1
    assert "sharded/zero.cpp: its folder is no layer of LAYERS" in r.stdout


def test_a_readme_that_says_otherwise_fails(tree):
    readme = tree / "views" / "README.md"
    readme.write_text(readme.read_text().replace("May use: base, pipeline, records", "May use: base, pipeline, records, run"))
    r = check(tree)
    assert r.returncode == 1
    assert "views/README.md: 'May use:' says base, pipeline, records, run, LAYERS says base, pipeline, records" in r.stdout


def test_a_layer_that_uses_one_above_it_is_a_cycle(tree):
    layers = tree / "LAYERS"
    layers.write_text(layers.read_text().replace("devices:        compat base\n",
                                                 "devices:        compat base run\n"))
    readme = tree / "devices" / "README.md"
    readme.write_text(readme.read_text().replace("May use: compat, base", "May use: compat, base, run"))
    r = check(tree)
    assert r.returncode == 1
    assert "LAYERS: devices may use 'run', listed after it" in r.stdout


def test_malformed_layers_is_exit_two_in_one_line(tree):
    append(tree / "LAYERS", "this line has no colon\n")
    r = check(tree)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and "LAYERS:" in r.stderr


# ---- the Python packages' layers ---------------------------------------------------------------

@pytest.fixture
def py_tree(tmp_path):
    """A copy of LAYERS and of the Python packages it lists, their .py files only."""
    shutil.copy(os.path.join(ROOT, "LAYERS"), tmp_path / "LAYERS")
    assert {"reports", "projection"} <= set(python_packages(ROOT))
    copy_python_packages(ROOT, tmp_path)
    for folder in layer_folders(ROOT):  # LAYERS names the C++ folders too; empty ones hold nothing to check
        os.makedirs(tmp_path / folder, exist_ok=True)
    return tmp_path


def test_the_python_packages_copy_follows_them(py_tree):
    r = check(py_tree)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_late_import_of_a_package_above_is_refused(py_tree):
    # What reports/report.py did: a function that imported projection, while projection imports reports.
    report = py_tree / "reports" / "report.py"
    lines = report.read_text().count("\n")
    append(report, "def _late():\n    from projection import cli  # noqa\n")
    r = check(py_tree)
    assert r.returncode == 1
    assert (f"reports/report.py:{lines + 2}: python package reports may not import projection" in r.stdout), r.stdout


def test_plain_and_dotted_imports_are_seen_and_others_are_not(py_tree):
    stats = py_tree / "reports" / "stats.py"
    append(stats, "import os, json as j\nimport matplotlib.pyplot as plt\n")
    assert check(py_tree).returncode == 0
    append(stats, "import json, projection.model as m\n")
    r = check(py_tree)
    assert r.returncode == 1
    assert "python package reports may not import projection" in r.stdout


def test_a_relative_import_that_leaves_the_package_is_refused(py_tree):
    append(py_tree / "reports" / "files.py", "from ..projection import model\n")
    r = check(py_tree)
    assert r.returncode == 1
    assert "a relative import that leaves the package reports" in r.stdout


def test_a_python_cycle_in_layers_is_refused(py_tree):
    layers = py_tree / "LAYERS"
    text = layers.read_text()
    assert "python reports:       -\n" in text
    layers.write_text(text.replace("python reports:       -\n", "python reports:       projection\n"))
    r = check(py_tree)
    assert r.returncode == 1
    assert "LAYERS: python reports may use 'projection', listed after it" in r.stdout
