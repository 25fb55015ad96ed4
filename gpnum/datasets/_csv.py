"""Reading numeric CSV tables on the host, with errors that point at the offending cell.

Data loaders run once, before any model exists, so they use NumPy directly: the table is parsed
into a float64 host array and only the finished splits are transferred to the target backend.
"""

from __future__ import annotations

import gzip
import io
import os

import numpy as np

__all__ = ["read_table", "decode_table"]

_HEADER_MODES = (None, "infer")


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _clean(cell: str) -> str:
    return cell.strip().strip('"').strip()


def _data_lines(lines, first):
    """Yield ``(line_number, line)``, 1-based, of the non-blank lines from index ``first``."""
    for i in range(first, len(lines)):
        if lines[i].strip():
            yield i + 1, lines[i]


def _locate_bad_cell(lines, first, n_cols, names, source):
    """Find the first cell that does not parse as a number, for an error message."""
    for lineno, line in _data_lines(lines, first):
        cells = line.split(",")
        if len(cells) != n_cols:
            return (f"{source}: line {lineno}: expected {n_cols} comma-separated cells, "
                    f"got {len(cells)}")
        for j, cell in enumerate(cells):
            if not _is_number(_clean(cell)):
                what = "an empty cell" if not _clean(cell) else f"{_clean(cell)!r}"
                return (f"{source}: line {lineno}, column {j + 1} ({names[j]!r}): expected a "
                        f"number, got {what}")
    return None


_MISSING_CELLS = ("", "nan", "na")


def _decode_with_missing(lines, body, n_cols, names, source):
    """Parse the data rows cell by cell: an empty cell, ``nan`` or ``NA`` becomes NaN."""
    rows = []
    for lineno, line in _data_lines(lines, body):
        cells = [_clean(c) for c in line.split(",")]
        if len(cells) != n_cols:
            raise ValueError(f"{source}: line {lineno}: expected {n_cols} comma-separated "
                             f"cells, got {len(cells)}")
        row = []
        for j, cell in enumerate(cells):
            if cell.lower() in _MISSING_CELLS:
                row.append(np.nan)
            elif _is_number(cell):
                row.append(float(cell))
            else:
                raise ValueError(f"{source}: line {lineno}, column {j + 1} ({names[j]!r}): "
                                 f"expected a number or an empty cell (missing), got {cell!r}")
        rows.append(row)
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), n_cols)


def decode_table(text: str, *, header="infer", source: str = "<csv>", missing=False):
    """Parse CSV text of numbers into a float64 array.

    Parameters
    ----------
    text : str
        The whole file, already decompressed.
    header : {None, "infer"}
        ``None``: every non-blank line is data. ``"infer"``: the first non-blank line is a header
        if any of its cells is not a number.
    source : str
        How to name the table in error messages (usually its path).
    missing : bool
        If True, an empty cell, ``nan`` or ``NA`` (any case) is a missing value, returned as
        NaN; infinite values are still refused. If False (default), any of them raises.

    Returns
    -------
    data : numpy.ndarray, shape (n, c), float64
    names : tuple of str
        The header's column names, or ``("col0", "col1", ...)`` without a header.
    has_header : bool

    Raises
    ------
    ValueError
        On an empty table, a ragged row, a cell that is not a number, or a NaN/Inf cell; the
        message names the line (1-based, counting the header) and the column (0-based).
    """
    if header not in _HEADER_MODES:
        raise ValueError(f"header: expected None or 'infer', got {header!r}")
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise ValueError(f"{source}: expected a table of numbers, got an empty file")
    first_cells = [_clean(c) for c in lines[first].split(",")]
    has_header = header == "infer" and not all(_is_number(c) for c in first_cells)
    n_cols = len(first_cells)
    names = tuple(first_cells) if has_header else tuple(f"col{j}" for j in range(n_cols))
    body = first + 1 if has_header else first
    if next(_data_lines(lines, body), None) is None:
        raise ValueError(f"{source}: expected at least one row of data after the header, got none")
    if missing:
        data = _decode_with_missing(lines, body, n_cols, names, source)
        if np.isinf(data).any():
            r, j = (int(v) for v in np.argwhere(np.isinf(data))[0])
            raise ValueError(f"{source}: data row {r + 1}, column {j + 1} ({names[j]!r}): "
                             "expected a finite number or a missing cell, got an infinite value")
        return data, names, has_header
    try:
        data = np.loadtxt(io.StringIO("\n".join(lines[body:])), delimiter=",", dtype=np.float64,
                          comments=None, quotechar='"', ndmin=2)
    except ValueError as exc:
        message = _locate_bad_cell(lines, body, n_cols, names, source)
        raise ValueError(message or f"{source}: {exc}") from None
    if data.shape[1] != n_cols:  # a header wider or narrower than the data
        raise ValueError(f"{source}: the header has {n_cols} columns but the data rows have "
                         f"{data.shape[1]}")
    bad = ~np.isfinite(data)
    if bad.any():
        r, j = (int(v) for v in np.argwhere(bad)[0])
        lineno = next(ln for k, (ln, _) in enumerate(_data_lines(lines, body)) if k == r)
        kind = "NaN (a missing value)" if np.isnan(data[r, j]) else "an infinite value"
        raise ValueError(f"{source}: line {lineno}, column {j + 1} ({names[j]!r}): expected a finite "
                         f"number, got {kind}; {int(bad.sum())} such cell(s) in all. Remove or "
                         "impute them before loading.")
    return data, names, has_header


def read_table(source, *, header="infer", missing=False):
    """Read a CSV file (gzip-compressed if its name ends in ``.gz``) into a float64 array.

    Parameters
    ----------
    source : str, os.PathLike or importlib.resources Traversable
        The file.
    header : {None, "infer"}
        See :func:`decode_table`.
    missing : bool
        Empty / ``nan`` / ``NA`` cells become NaN (see :func:`decode_table`).

    Returns
    -------
    data : numpy.ndarray, shape (n, c), float64
    names : tuple of str
    has_header : bool
    """
    label = str(source)
    if isinstance(source, (str, os.PathLike)) and not os.path.isfile(source):
        raise FileNotFoundError(f"path: expected an existing CSV file, got {label!r}")
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as fh:
            raw = fh.read()
    else:  # a Traversable from importlib.resources (possibly inside a zip)
        with source.open("rb") as fh:
            raw = fh.read()
    if label.endswith(".gz") or raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{label}: expected a UTF-8 text CSV file ({exc})") from None
    return decode_table(text, header=header, source=label, missing=missing)
