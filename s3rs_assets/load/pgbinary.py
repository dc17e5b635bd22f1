"""Arrow -> PostgreSQL's binary COPY format, vectorized (numpy and Arrow kernels, no
Python loop over rows).

`COPY ... FROM STDIN (FORMAT binary)` data is a header, then per row an int16 field count
and per field an int32 byte length (-1 for NULL) followed by the value in the type's
binary "send" format, big-endian, then an int16 -1 trailer. Each column of a record batch
is encoded into a large_binary array of complete fields; Arrow's
`binary_join_element_wise` then lays the rows out, and its data buffer is the stream.

Encodings, one per Arrow type `types.py` produces (and the PostgreSQL type it maps to):

    int16/int32/int64, float32/float64, bool   the value's bytes (IEEE bits: NaN, +-inf
                                               and -0.0 survive exactly)
    date32                                     int32 days since 2000-01-01
    timestamp[us] (naive)                      int64 microseconds since 2000-01-01
    decimal128(p, s)                           NUMERIC: ndigits, weight, sign, dscale and
                                               base-10000 digits, computed from the 128-bit
                                               value in 32-bit limbs (DECIMAL(38, s) too)
    string, binary                             the bytes as they are (no escaping at all)

Why: PostgreSQL parses binary fields far faster than CSV text (numeric and timestamp
input dominate a CSV COPY), and bytea needs no hex text.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
TRAILER = b"\xff\xff"
_NULL = np.frombuffer(b"\xff\xff\xff\xff", np.uint8)
_PG_EPOCH_DAYS = 10_957  # 2000-01-01 - 1970-01-01
_PG_EPOCH_US = _PG_EPOCH_DAYS * 86_400 * 1_000_000
_MASK32 = np.uint64(0xFFFFFFFF)
_BASE = np.uint64(10_000)


def _fields(arr: pa.Array, payload: np.ndarray) -> pa.Array:
    """Fields of a fixed-width type; `payload` is (n, w) uint8, one big-endian value per
    row (whatever it holds for NULL rows is dropped)."""
    n, w = payload.shape
    matrix = np.empty((n, 4 + w), np.uint8)
    matrix[:, :4] = np.frombuffer(w.to_bytes(4, "big"), np.uint8)
    matrix[:, 4:] = payload
    if not arr.null_count:
        offsets = np.arange(0, (n + 1) * (4 + w), 4 + w, dtype=np.int64)
        data = matrix.reshape(-1)
    else:
        null = ~arr.is_valid().to_numpy(zero_copy_only=False)
        matrix[null, :4] = _NULL
        keep = np.ones((n, 4 + w), bool)
        keep[null, 4:] = False
        data = matrix[keep]
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.where(null, 4, 4 + w), out=offsets[1:])
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _values(arr: pa.Array, dtype: str, shift: int = 0) -> pa.Array:
    vals = arr.to_numpy(zero_copy_only=False)
    if arr.null_count:  # to_numpy gives NaN/None/object for NULLs: refill first
        vals = arr.fill_null(pa.scalar(False if dtype == ">u1" else 0, arr.type)).to_numpy(
            zero_copy_only=False
        )
    if shift:
        vals = vals - shift
    be = np.ascontiguousarray(vals.astype(dtype))
    return _fields(arr, be.view(np.uint8).reshape(len(arr), be.dtype.itemsize))


def _numeric(arr: pa.Array) -> pa.Array:
    """decimal128(p, s) as NUMERIC. All G digit groups a DECIMAL(p, s) can need are sent,
    leading and trailing zero groups included (PostgreSQL strips them), so every field of
    a column has the same width; weight = integer groups - 1, dscale = s."""
    p, s, n = arr.type.precision, arr.type.scale, len(arr)
    filled = arr.fill_null(pa.scalar(0, arr.type)) if arr.null_count else arr
    raw = np.frombuffer(filled.buffers()[1], np.uint64)
    raw = raw[2 * filled.offset : 2 * (filled.offset + n)]
    lo, hi = raw[0::2], raw[1::2]  # little-endian two's complement halves
    neg = hi >= np.uint64(1 << 63)
    nlo = ~lo + np.uint64(1)
    nhi = ~hi + (nlo == 0).astype(np.uint64)
    lo, hi = np.where(neg, nlo, lo), np.where(neg, nhi, hi)  # |value|
    pad = (4 - s % 4) % 4  # scale the value so its fraction is whole base-10000 groups
    frac_groups, int_groups = (s + pad) // 4, -(-(p - s) // 4)
    groups = frac_groups + int_groups
    limbs = [lo & _MASK32, lo >> np.uint64(32), hi & _MASK32, hi >> np.uint64(32)]
    limbs.append(np.zeros(n, np.uint64))  # 10^38 * 10^3 needs 137 bits
    used = 5 if p + pad > 18 else 2  # fewer limbs for values below 2^64
    if pad:
        m, carry = np.uint64(10**pad), np.zeros(n, np.uint64)
        for i in range(used):
            t = limbs[i] * m + carry
            limbs[i], carry = t & _MASK32, t >> np.uint64(32)
    body = np.empty((n, 4 + groups), ">i2")
    body[:, 0] = groups
    body[:, 1] = int_groups - 1
    body[:, 2] = np.where(neg, 0x4000, 0)
    body[:, 3] = s
    for g in range(groups - 1, -1, -1):  # long division by 10^4, least significant first
        rem = np.zeros(n, np.uint64)
        for i in range(used - 1, -1, -1):
            t = (rem << np.uint64(32)) | limbs[i]
            limbs[i], rem = t // _BASE, t % _BASE
        body[:, 4 + g] = rem
    return _fields(arr, body.view(np.uint8).reshape(n, 2 * (4 + groups)))


def _bytes(arr: pa.Array) -> pa.Array:
    """string / binary: the length, then the bytes as they are."""
    n = len(arr)
    data = arr.cast(pa.large_binary())
    lens = pc.binary_length(data).fill_null(0).to_numpy(zero_copy_only=False)
    heads = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(),
        n,
        [
            None,
            pa.py_buffer(np.arange(0, 4 * (n + 1), 4, dtype=np.int64)),
            pa.py_buffer(np.ascontiguousarray(lens.astype(">i4"))),
        ],
    )
    out = pc.binary_join_element_wise(heads, data, pa.scalar(b"", pa.large_binary()))
    if arr.null_count:
        out = out.fill_null(pa.scalar(_NULL.tobytes(), pa.large_binary()))
    return out


def encode_column(arr: pa.Array) -> pa.Array:
    """One column as complete binary COPY fields; TypeError for a type s3rs never loads."""
    t = arr.type
    for check, dtype in (
        (pa.types.is_int16, ">i2"),
        (pa.types.is_int32, ">i4"),
        (pa.types.is_int64, ">i8"),
        (pa.types.is_float32, ">f4"),
        (pa.types.is_float64, ">f8"),
        (pa.types.is_boolean, ">u1"),
    ):
        if check(t):
            return _values(arr, dtype)
    if pa.types.is_date32(t):
        return _values(arr.cast(pa.int32()), ">i4", shift=_PG_EPOCH_DAYS)
    if pa.types.is_timestamp(t) and t.unit == "us" and t.tz is None:
        return _values(arr.cast(pa.int64()), ">i8", shift=_PG_EPOCH_US)
    if pa.types.is_decimal128(t):
        return _numeric(arr)
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return _bytes(arr)
    raise TypeError(f"no binary COPY encoding for Arrow type {t}")


def binary_chunks(table: pa.Table, batch_rows: int = 65_536) -> Iterator[memoryview]:
    """The rows of `table` as `COPY ... (FORMAT binary)` data, without HEADER and TRAILER
    (one stream may hold several tables)."""
    count = pa.scalar(table.num_columns.to_bytes(2, "big"), pa.large_binary())
    sep = pa.scalar(b"", pa.large_binary())
    for batch in table.to_batches(max_chunksize=batch_rows):
        if not batch.num_rows:
            continue
        fields = [encode_column(batch.column(i)) for i in range(batch.num_columns)]
        rows = pc.binary_join_element_wise(count, *fields, sep)
        offsets = np.frombuffer(rows.buffers()[1], np.int64)
        first, last = offsets[rows.offset], offsets[rows.offset + len(rows)]
        yield memoryview(rows.buffers()[2])[first:last]
