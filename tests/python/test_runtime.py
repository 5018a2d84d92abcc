# SPDX-License-Identifier: MIT OR Apache-2.0
"""The runtime from Python: discovery, entries, selection and its refusal, levers, kernels, lookups
and the audit, locks."""
import json
import os
import subprocess
import sys

import pytest

import metrale
from conftest import run_cli


def test_entries_and_backends(runtime):
    entries = runtime.entries()
    cpu_entry = next(e for e in entries if e["backend"] == "cpu")
    assert cpu_entry["state"] == "loaded"
    assert cpu_entry["reason"] == ""
    assert cpu_entry["manifest"].endswith("cpu.json")
    assert cpu_entry["origin"] == "build tree"  # this suite imports the build tree's package
    names = [b.name for b in runtime.backends()]
    assert "cpu" in names
    backend = runtime.find("cpu")
    assert backend.target.startswith("cpu-")
    assert runtime.find("nosuch") is None


def test_discovery_options_list_exact_manifests(runtime, cpu):
    # An explicit list of manifests replaces the search (its origin reads as the lever that does the same).
    only = metrale.Runtime(manifests=[cpu.manifest])
    assert [(e["backend"], e["origin"]) for e in only.entries()] == [("cpu", "METRALE_MANIFESTS")]
    # A manifest that is not there becomes an entry with its reason, never an exception.
    missing = metrale.Runtime(manifests=["/nonexistent/x.json"])
    (entry,) = missing.entries()
    assert entry["state"] == "invalid"
    assert entry["reason"] == "/nonexistent/x.json: (document): cannot read the manifest: No such file or directory"
    assert missing.backends() == []


def test_refusal_is_its_own_class_with_the_cli_message(runtime, cli):
    with pytest.raises(metrale.Refusal) as refused:
        runtime.select("nosuch")
    assert isinstance(refused.value, metrale.Error)
    assert refused.value.status == "incompatible"
    _, stderr = run_cli(cli, "run", "--backend", "nosuch", "--quiet", expect=3, cpu_only=False)
    assert stderr.strip() == "metrale: error: refusing to start: " + str(refused.value)


def test_other_errors_are_not_refusals(cpu):
    with pytest.raises(metrale.Error) as failed:
        cpu.kernel("w4a16", "no_such_kernel")
    assert not isinstance(failed.value, metrale.Refusal)
    assert failed.value.status == "not-found"
    # Module, name, backend and why: what the module does list.
    assert str(failed.value).startswith(f"w4a16/no_such_kernel on backend cpu ({cpu.target}): not in manifest: "
                                        "module 'w4a16' lists w4a16_gemv")


def test_try_kernel_returns_none_and_the_audit_says_why(runtime, cpu):
    assert cpu.try_kernel("w4a16", "no_such_kernel") is None
    row = runtime.audit()[-1]
    assert (row["module"], row["kernel"], row["kind"], row["outcome"]) == ("w4a16", "no_such_kernel", "try", "null")
    assert row["reason"]
    # The Python line that asked is on the row.
    assert row["annotations"]["python"].startswith(__file__)

    gemv = cpu.try_kernel("w4a16", "w4a16_gemv")
    assert gemv is not None
    assert (gemv.module, gemv.name) == ("w4a16", "w4a16_gemv")
    assert [t for _, t in gemv.params] == ["ptr", "ptr", "ptr", "ptr", "u32", "u32", "u32"]
    row = cpu.audit()[-1]
    assert (row["kernel"], row["outcome"], row["backend"]) == ("w4a16_gemv", "resolved", "cpu")


def test_kernels_listed_per_backend(cpu, cli):
    kernels = cpu.kernels()
    listed = {(k["module"], k["name"]) for k in kernels if k["listed"]}
    assert ("w4a16", "w4a16_gemv") in listed
    stdout, _ = run_cli(cli, "kernels", "--json")
    document = json.loads(stdout)
    text = json.dumps(document)
    for module, name in listed:
        assert name in text


def test_levers(runtime):
    levers = {lever["name"]: lever for lever in metrale.levers()}
    assert "METRALE_BACKEND" in levers
    assert levers["METRALE_BACKEND"]["declared_by"] == "runtime"
    assert any(lever["declared_by"] == "layers" for lever in levers.values())  # open_runtime declares them
    assert all(set(lever) >= {"type", "default", "meaning", "value"} for lever in levers.values())


def test_audit_to_json_is_the_cli_format(runtime, cpu):
    cpu.try_kernel("w4a16", "w4a16_gemv")
    rows = runtime.audit()
    text = metrale.to_json(rows)
    assert json.loads(text) == rows
    assert "w4a16_gemv" in metrale.audit_table(rows)


def test_lock_write_enforce_diff(tmp_path, cpu):
    cpu.try_kernel("w4a16", "w4a16_gemv")
    rows = [r for r in cpu.audit() if r["kernel"] == "w4a16_gemv"][-1:]
    lock = tmp_path / "py.lock"
    metrale.write_lock(lock, cpu, rows)
    document = json.loads(lock.read_text())
    assert document["lock_format"] == 1
    assert metrale.lock_differences(lock, rows) == []
    # The same site resolving another kernel is a difference, named.
    changed = [dict(rows[0], kernel="w4a16_gemv_b8")]
    differences = metrale.lock_differences(document, changed)
    assert differences and any("w4a16_gemv" in d for d in differences)
    assert metrale.diff_audits(rows, changed)
    assert metrale.diff_audits(rows, rows) == []


def test_enforce_lock_refuses_a_difference(tmp_path, cpu):
    # METRALE_LOCK is read once per process: a child process gets its own.
    cpu.try_kernel("w4a16", "w4a16_gemv")
    rows = [r for r in cpu.audit() if r["kernel"] == "w4a16_gemv"][-1:]
    lock = tmp_path / "other.lock"
    metrale.write_lock(lock, cpu, [dict(rows[0], kernel="w4a16_gemv_b8")])
    child = f"""
import json, sys, metrale
rows = json.loads(sys.argv[1])
cpu = metrale.Runtime().select("cpu")
try:
    metrale.enforce_lock(cpu, rows)
except metrale.Refusal as e:
    print("refused:", e)
    sys.exit(3)
"""
    done = subprocess.run([sys.executable, "-c", child, json.dumps(rows)], capture_output=True, text=True,
                          env=dict(os.environ, METRALE_LOCK=str(lock)))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "refused:" in done.stdout and "w4a16_gemv" in done.stdout


def test_bad_lever_value_is_a_refusal_naming_it():
    child = "import metrale\ntry:\n    metrale.Runtime()\nexcept metrale.Refusal as e:\n    print(e)\n    raise SystemExit(3)\n"
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          env=dict(os.environ, METRALE_CPU_THREADS="lots"))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "METRALE_CPU_THREADS" in done.stdout and "lots" in done.stdout
