"""LiveCodeBench's test cases as upstream stores them: validated, and the private ones decoded without running code.

Private tests are stored upstream as ``base64(zlib(pickle(json_string)))``. Unpickling
untrusted data can run code, so :func:`decode_private_tests` uses an unpickler that
refuses every global: only plain data (a string) comes out.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import zlib
from typing import Any


class RefusedGlobalError(pickle.UnpicklingError):
    """A pickle asked for a global (a class or function); only plain data is allowed."""


class _NoGlobalsUnpickler(pickle.Unpickler):
    """An unpickler for plain data only: every global (class, function) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise RefusedGlobalError(
            f"refusing to load global {module}.{name}: LiveCodeBench private tests must be plain data"
        )


def restricted_loads(data: bytes) -> Any:
    """``pickle.loads`` that refuses every global (so no code can run while loading)."""
    return _NoGlobalsUnpickler(io.BytesIO(data)).load()


def encode_private_tests(tests: list[dict[str, Any]]) -> str:
    """Encode tests exactly as upstream stores ``private_test_cases``."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode("ascii")


def decode_private_tests(value: str, *, where: str = "private_test_cases") -> list[dict[str, Any]]:
    """Decode upstream's ``private_test_cases``: plain JSON, or base64(zlib(pickle(json)))."""
    if not value or not value.strip():
        return []
    try:
        plain = json.loads(value)
    except json.JSONDecodeError:
        plain = None
    if isinstance(plain, list):
        return parse_tests(plain, where=where)
    try:
        raw = zlib.decompress(base64.b64decode(value.encode("ascii"), validate=False))
    except (binascii.Error, zlib.error, UnicodeEncodeError, ValueError) as exc:
        raise ValueError(f"{where}: neither JSON nor base64(zlib(pickle(json))): {exc}") from exc
    try:
        decoded = restricted_loads(raw)
    except RefusedGlobalError as exc:
        raise ValueError(f"{where}: {exc}") from exc
    except Exception as exc:  # a corrupt pickle raises many kinds of error
        raise ValueError(f"{where}: the pickle is corrupt ({type(exc).__name__}: {exc})") from exc
    if not isinstance(decoded, str):
        raise ValueError(f"{where}: the pickle holds {type(decoded).__name__}, expected a JSON string")
    try:
        return parse_tests(json.loads(decoded), where=where)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: the decoded pickle is not JSON ({exc.msg})") from exc


def parse_tests(value: Any, *, where: str = "tests") -> list[dict[str, Any]]:
    """Validate a list of upstream test dicts (``input``, ``output``, ``testtype``)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not valid JSON ({exc.msg} at position {exc.pos})") from exc
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list of tests, got {type(value).__name__}")
    tests: list[dict[str, Any]] = []
    for i, test in enumerate(value):
        if not isinstance(test, dict):
            raise ValueError(f"{where}[{i}]: expected an object, got {type(test).__name__}")
        for key in ("input", "output"):
            if not isinstance(test.get(key), str):
                raise ValueError(f"{where}[{i}]: field {key!r} must be a string")
        testtype = test.get("testtype", "stdin")
        if testtype not in ("stdin", "functional"):
            raise ValueError(f"{where}[{i}]: field 'testtype' must be 'stdin' or 'functional', got {testtype!r}")
        tests.append({"input": test["input"], "output": test["output"], "testtype": testtype})
    return tests


def problem_tests(metadata: dict[str, Any], *, where: str = "problem") -> list[dict[str, Any]]:
    """All tests of a LiveCodeBench problem (public, then private) from its metadata."""
    public = parse_tests(metadata.get("public_test_cases", "[]"), where=f"{where}: public_test_cases")
    private = decode_private_tests(metadata.get("private_test_cases", ""), where=f"{where}: private_test_cases")
    return public + private
