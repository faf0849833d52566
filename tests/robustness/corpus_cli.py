"""Command-line usage: unknown options and commands, missing arguments and values."""

from __future__ import annotations

from .harness import Case

COMMANDS = ("estimate", "models", "hardware", "simulate", "open", "capture", "query", "analyze", "compare", "demo",
            "validate", "calibrate", "workloads", "verify")

CASES: list[Case] = [
    # Positive control.
    Case("cli-ok-models-json", ("models", "--json"), code=0, stdout_json=True),
    # An unknown option on every command, named in the error.
    *(Case(f"cli-unknown-option-{command}", (command, "--no-such-option"), {}, ("--no-such-option",))
      for command in COMMANDS),
    Case("cli-unknown-option-root", ("--no-such-option", "models"), {}, ("--no-such-option",)),
    Case("cli-unknown-command", ("estimat",), {}, ("estimat",)),
    Case("cli-unknown-command-upper", ("ESTIMATE",), {}, ("ESTIMATE",)),
    Case("cli-extra-argument", ("estimate", "extra-positional"), {}, ("extra-positional",)),
    Case("cli-extra-argument-models", ("models", "extra"), {}, ("extra",)),
    Case("cli-option-missing-value", ("estimate", "--model"), {}, ("--model",)),
    Case("cli-option-missing-value-simulate", ("simulate", "--out"), {}, ("--out",)),
    Case("cli-short-option-unknown", ("estimate", "-Z"), {}, ("-Z",)),
    Case("cli-flag-given-value", ("estimate", "--all-ops=yes"), {}, ("--all-ops",)),
    # Required arguments missing.
    Case("cli-query-no-trace", ("query",), {}, ("trace",)),
    Case("cli-analyze-no-trace", ("analyze",), {}, ("trace",)),
    Case("cli-open-no-trace", ("open",), {}, ("trace",)),
    Case("cli-capture-no-model", ("capture",), {}, ("--model",)),
    Case("cli-validate-no-model", ("validate",), {}, ("--model",)),
    Case("cli-workloads-no-out", ("workloads", "--model", "llama-3.2-1b", "--from-graph"), {}, ("--out",)),
    Case("cli-workloads-no-model", ("workloads", "--out", "wl"), {}, ("--model",)),
    Case("cli-verify-no-traces", ("verify",), {}, ("--traces",)),
    Case("cli-calibrate-no-out", ("calibrate",), {}, ("--out",)),
    # Values of the wrong type.
    Case("cli-int-option-word", ("simulate", "--decode-steps", "few"), {}, ("--decode-steps",)),
    Case("cli-int-option-float", ("capture", "--model", "gpt2", "--layers", "1.5"), {}, ("--layers",)),
    Case("cli-int-option-empty", ("estimate", "--tp", ""), {}, ("--tp",)),
    Case("cli-float-option-word", ("analyze", "t.json", "--threshold-ms", "fast"), {}, ("--threshold-ms",)),
]
