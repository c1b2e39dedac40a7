"""The wire's building blocks: the primitive types and the construct fields the layouts are declared with.

Layout (NATIVE-PROTOCOL.md, "Framing"): integers are big-endian and signed
(construct's Int16sb, Int32sb, Int64sb); `str` is `length:int16` followed by that
many UTF-8 bytes, length -1 = null.

Contract:
- requests.py and responses.py declare every body once with construct, from the
  fields here and construct's integers and `Rebuild`, and `.compile()` each
  declaration; parsing and building run the compiled code of that one declaration.
- `Record(cls, *fields)` maps a run of fields to a value class: parsing calls
  `cls(...)` with the value fields in order, building reads them back by the class's
  field names. A field built from nothing (`Rebuild`, `Length`: counts and sizes) is
  not a value field. `leading` are constructor arguments not on the wire (a
  response's NONE error, which the frame header carries); class fields after the
  value fields keep their defaults (a later version's field, an error message). A compiled Record reads
  and writes each run of consecutive integer fields (counts, sizes and error codes
  included) with one `struct.Struct`, as a hand-written codec would.
- `Tagged(what, cases)` is an int16 tag followed by the layout `cases[tag]` (a
  request's type and body); an unknown tag is a parse error.
- `Str` / `NullableStr` are `str` and `str?`; `MessageSet(length)` is a byte run
  that parses as a memoryview slice of the frame (no copy) and builds from any
  bytes-like object; `Length(int, field, extra)` is the size of such a run;
  `Items(count_field, item)` repeats `item` as often as the named count field
  says, `UntilEnd(item)` until the frame ends; `ErrorField` is an int16 error code
  (`as_error_code`).
- Parsing reads a `FrameStream` (a cursor over one frame). Every read is bounds
  checked, so the compiled code cannot run past the frame or take a negative
  size; `Str` refuses null and strings that are not UTF-8; `Items` refuses a
  negative count. What goes wrong raises a construct error, `struct.error` or
  `UnicodeDecodeError`: internal errors, which the public parse functions turn
  into the one `ProtocolError` (PARSE_ERRORS lists them; `describe` words them).
- Building writes to a `PartsStream`, which keeps the parts (message sets
  included) without copying; the caller joins them once. Values the wire cannot
  carry raise ValueError (`encode_str`) or `struct.error` (an int out of range),
  which the public encoders turn into ValueError.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from functools import partial
from typing import Any, Protocol, TypeVar, runtime_checkable

from construct import Construct, ConstructError, FormatField, Rebuild, Renamed, StreamError, this
from construct.expr import FuncPath

from .errors import as_error_code

Tag = TypeVar("Tag", bound=int)

INT16 = struct.Struct(">h")
INT16_MAX = 2**15 - 1
NULL_STR = INT16.pack(-1)

Buffer = bytes | bytearray | memoryview

# Everything a compiled layout may raise on bad bytes (see the module contract).
PARSE_ERRORS = (ConstructError, struct.error, UnicodeDecodeError)


def describe(error: Exception) -> str:
    """Words for a parse error, without construct's path prefix."""
    if isinstance(error, UnicodeDecodeError):
        return f"string is not valid UTF-8 ({error.reason})"
    if isinstance(error, struct.error):
        return f"bad integer field ({error})"
    return str(error).rpartition("\n")[2] or type(error).__name__


# ---- streams --------------------------------------------------------------------------------

class FrameStream:
    """A read cursor over one frame. `read(n)` returns a memoryview slice of the
    frame (no copy) and raises StreamError for a negative n or one past the end;
    `read()` returns the rest."""

    __slots__ = ("_view", "_pos", "_len")

    def __init__(self, frame: Buffer) -> None:
        view = memoryview(frame)
        self._view = view if view.format == "B" and view.ndim == 1 else view.cast("B")
        self._pos = 0
        self._len = len(self._view)

    def read(self, n: int | None = None) -> memoryview:
        pos = self._pos
        if n is None:
            n = self._len - pos
        elif n < 0:
            raise StreamError(f"negative size {n}")
        end = pos + n
        if end > self._len:
            raise StreamError(f"truncated: need {n} bytes, have {self._len - pos}")
        self._pos = end
        return self._view[pos:end]

    @property
    def remaining(self) -> int:
        return self._len - self._pos

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = offset if whence == 0 else (self._pos + offset if whence == 1 else self._len + offset)
        return self._pos

    def expect_end(self) -> None:
        if self._pos != self._len:
            raise StreamError(f"{self._len - self._pos} trailing bytes after the body")


class PartsStream:
    """A write stream that keeps the parts it is given, in order, without copying."""

    __slots__ = ("parts", "size")

    def __init__(self) -> None:
        self.parts: list[Buffer] = []
        self.size = 0

    def write(self, data: Buffer) -> int:
        self.parts.append(data)
        n = len(data)
        self.size += n
        return n

    def tell(self) -> int:
        return self.size


# ---- str ------------------------------------------------------------------------------------

def encode_nullable_str(value: str | None) -> bytes:
    if value is None:
        return NULL_STR
    if not isinstance(value, str):
        raise ValueError(f"expected str, got {type(value).__name__}")
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"string cannot be encoded as UTF-8: {e.reason}") from None
    if len(raw) > INT16_MAX:
        raise ValueError(f"string of {len(raw)} UTF-8 bytes exceeds {INT16_MAX}")
    return INT16.pack(len(raw)) + raw


def encode_str(value: str) -> bytes:
    if value is None:
        raise ValueError("null is not allowed here")
    return encode_nullable_str(value)


def parse_nullable_str(stream: FrameStream) -> str | None:
    (n,) = INT16.unpack(stream.read(2))
    return None if n == -1 else str(stream.read(n), "utf-8")


def parse_str(stream: FrameStream) -> str:
    (n,) = INT16.unpack(stream.read(2))
    if n == -1:
        raise StreamError("null string where null is not allowed")
    return str(stream.read(n), "utf-8")


def nbytes(data: Buffer) -> int:
    return data.nbytes if isinstance(data, memoryview) else len(data)


def as_bytes(data: Buffer) -> Buffer:
    """A bytes-like object as one whose len() is its size in bytes."""
    if isinstance(data, memoryview) and (data.format != "B" or data.ndim != 1):
        return data.cast("B")
    return data


_IMPORTS = f"from {__name__} import parse_str, parse_nullable_str, encode_str, encode_nullable_str, " \
           "nbytes as nbytes_, as_bytes, as_error_code"


# ---- fields ---------------------------------------------------------------------------------

class StrField(Construct):
    """`str` (int16 length + UTF-8) or, with nullable, `str?` (length -1 = None)."""

    def __init__(self, nullable: bool) -> None:
        super().__init__()
        self.nullable = nullable

    def _parse(self, stream: Any, context: Any, path: Any) -> str | None:
        return parse_nullable_str(stream) if self.nullable else parse_str(stream)

    def _build(self, obj: Any, stream: Any, context: Any, path: Any) -> Any:
        stream.write(encode_nullable_str(obj) if self.nullable else encode_str(obj))
        return obj

    def _emitparse(self, code: Any) -> str:
        code.append(_IMPORTS)
        return "parse_nullable_str(io)" if self.nullable else "parse_str(io)"

    def _emitbuild(self, code: Any) -> str:
        code.append(_IMPORTS)
        return f"(io.write({'encode_nullable_str' if self.nullable else 'encode_str'}(obj)), obj)[1]"


Str = StrField(nullable=False)
NullableStr = StrField(nullable=True)


class MessageSet(Construct):
    """Raw bytes, `length` of them (an expression), or to the end of the frame when
    length is None. Parses as a memoryview slice of the frame."""

    def __init__(self, length: Any = None) -> None:
        super().__init__()
        self.length = length

    def _parse(self, stream: Any, context: Any, path: Any) -> memoryview:
        return stream.read() if self.length is None else stream.read(self.length(context))

    def _build(self, obj: Any, stream: Any, context: Any, path: Any) -> Any:
        stream.write(as_bytes(obj))
        return obj

    def _emitparse(self, code: Any) -> str:
        return "io.read()" if self.length is None else f"io.read({self.length!r})"

    def _emitbuild(self, code: Any) -> str:
        code.append(_IMPORTS)
        return "(io.write(as_bytes(obj)), obj)[1]"


class Length(Rebuild):
    """An integer field that holds the size in bytes of the named field, plus `extra`."""

    def __init__(self, subcon: Construct, field: str, extra: int = 0) -> None:
        size = FuncPath(nbytes)(getattr(this, field))
        super().__init__(subcon, size + extra if extra else size)
        self.field = field

    def _emitbuild(self, code: Any) -> str:
        code.append(_IMPORTS)
        return str(super()._emitbuild(code))


class ErrorFieldType(Construct):
    """An int16 error code: an ErrorCode member, or the plain int for codes not in the table."""

    INT = FormatField(">", "h")

    def _parse(self, stream: Any, context: Any, path: Any) -> int:
        return as_error_code(self.INT._parse(stream, context, path))

    def _build(self, obj: Any, stream: Any, context: Any, path: Any) -> Any:
        return self.INT._build(obj, stream, context, path)

    def _emitparse(self, code: Any) -> str:
        code.append(_IMPORTS)
        return f"as_error_code({self.INT._compileparse(code)})"

    def _emitbuild(self, code: Any) -> str:
        return str(self.INT._compilebuild(code))


ErrorField = ErrorFieldType()


class _Repeated(Construct):
    """`item`, repeated: built item after item, the same for every way of counting."""

    def __init__(self, item: Construct) -> None:
        super().__init__()
        self.item = item

    def _build(self, obj: Any, stream: Any, context: Any, path: Any) -> Any:
        for item in obj:
            self.item._build(item, stream, context, path)
        return obj

    def _emitbuild(self, code: Any) -> str:
        return _emit_build_each(code, self.item)


class Items(_Repeated):
    """`item`, repeated as many times as the count field named `count` says (>= 0)."""

    def __init__(self, count: str, item: Construct) -> None:
        super().__init__(item)
        self.count = count

    def _parse(self, stream: Any, context: Any, path: Any) -> list:
        count = context[self.count]
        if count < 0:
            raise StreamError(f"negative count {count}")
        return [self.item._parse(stream, context, path) for _ in range(count)]

    def _emitparse(self, code: Any) -> str:
        fname = f"parse_items_{code.allocateId()}"
        code.append(f"""
            def {fname}(io, this):
                count = this[{self.count!r}]
                if count < 0:
                    raise StreamError(f"negative count {{count}}")
                return [{self.item._compileparse(code)} for _ in range(count)]
        """)
        return f"{fname}(io, this)"


class UntilEnd(_Repeated):
    """`item`, repeated until the frame ends (a body with no count prefix)."""

    def _parse(self, stream: Any, context: Any, path: Any) -> list:
        out = []
        while stream.remaining:
            out.append(self.item._parse(stream, context, path))
        return out

    def _emitparse(self, code: Any) -> str:
        fname = f"parse_until_end_{code.allocateId()}"
        code.append(f"""
            def {fname}(io, this):
                out = []
                while io.remaining:
                    out.append({self.item._compileparse(code)})
                return out
        """)
        return f"{fname}(io, this)"


def _emit_build_each(code: Any, item: Construct) -> str:
    fname = f"build_each_{code.allocateId()}"
    code.append(f"""
        def {fname}(items, io, this):
            for obj in items:
                {item._compilebuild(code)}
            return items
    """)
    return f"{fname}(obj, io, this)"


@runtime_checkable
class _NamedFields(Protocol):
    """A NamedTuple class (isinstance checks the class object for `_fields`)."""

    _fields: tuple[str, ...]


class Record(Construct):
    """A run of named fields that parses into `cls(*leading, *values)` and builds from an
    instance of `cls` (see the module contract). `cls` may be `tuple`: a plain tuple of
    the values, built by position."""

    def __init__(self, cls: type, *subcons: Construct, leading: tuple = ()) -> None:
        super().__init__()
        self.cls = cls
        self.subcons = list(subcons)
        self.leading = leading
        self.values = [sc.name for sc in subcons if not sc.flagbuildnone]
        if any(not sc.name for sc in subcons):
            raise TypeError(f"{cls.__name__}: every field of a Record is named")
        if cls is tuple:
            self.attrs: list[str | int] = list(range(len(self.values)))
        else:
            if is_dataclass(cls):
                names = [f.name for f in fields(cls)]
            elif isinstance(cls, _NamedFields):
                names = list(cls._fields)
            else:
                raise TypeError(f"{cls.__name__}: a Record's class is a dataclass, a NamedTuple or tuple")
            # The values are the class's fields after `leading`, in order; fields past them keep
            # their defaults (a field of a later version's layout, a response's error message).
            self.attrs = list(names[len(leading):len(leading) + len(self.values)])
            if len(self.attrs) != len(self.values):
                raise TypeError(f"{cls.__name__} has fields {self.attrs}, the layout values {self.values}")
        self.make = partial(cls, *leading) if leading else cls

    def _parse(self, stream: Any, context: Any, path: Any) -> Any:
        ctx: dict[str, Any] = {"_": context}
        for sc in self.subcons:
            ctx[sc.name] = sc._parse(stream, ctx, path)
        values = [ctx[name] for name in self.values]
        return tuple(values) if self.cls is tuple else self.make(*values)

    def _build(self, obj: Any, stream: Any, context: Any, path: Any) -> Any:
        ctx: dict[str, Any] = {"_": context}
        for name, attr in zip(self.values, self.attrs, strict=False):
            ctx[name] = obj[attr] if isinstance(attr, int) else getattr(obj, attr)
        for sc in self.subcons:
            ctx[sc.name] = sc._build(ctx.get(sc.name), stream, ctx, path)
        return obj

    def _emitparse(self, code: Any) -> str:
        fname = f"parse_record_{code.allocateId()}"
        lines = []
        for run in _runs(self.subcons):
            if isinstance(run, list):  # consecutive integers: one struct, one read
                lines += _emit_parse_run(code, run)
            else:
                lines.append(f"this[{run.name!r}] = {run._compileparse(code)}")
        args = ", ".join(f"this[{name!r}]" for name in self.values)
        if self.cls is tuple:
            result = f"({args},)"
        else:
            code.linkedinstances[id(self.make)] = self.make
            result = f"linkedinstances[{id(self.make)}]({args})"
        body = "\n                ".join(lines)
        code.append(f"""
            def {fname}(io, this):
                this = {{'_': this}}
                {body}
                return {result}
        """)
        return f"{fname}(io, this)"

    def _emitbuild(self, code: Any) -> str:
        fname = f"build_record_{code.allocateId()}"
        values = ", ".join(f"{name!r}: record[{attr}]" if isinstance(attr, int) else f"{name!r}: record.{attr}"
                           for name, attr in zip(self.values, self.attrs, strict=False))
        lines = []
        for run in _runs(self.subcons):
            if isinstance(run, list):
                lines += _emit_build_run(code, run)
            else:
                source = "None" if run.flagbuildnone else f"this[{run.name!r}]"
                lines.append(f"obj = {source}")
                lines.append(f"this[{run.name!r}] = {run._compilebuild(code)}")
        body = "\n                ".join(lines)
        code.append(f"""
            def {fname}(record, io, this):
                this = {{'_': this, {values}}}
                {body}
                return record
        """)
        return f"{fname}(obj, io, this)"


def _integer(sc: Construct) -> FormatField | None:
    """The integer under a named field (a plain, rebuilt or error-code one), else None."""
    inner = sc.subcon if isinstance(sc, Renamed) else sc
    if type(inner) in (Rebuild, Length):
        inner = inner.subcon
    if type(inner) is ErrorFieldType:
        inner = inner.INT
    return inner if type(inner) is FormatField else None


def _integer_format(sc: Construct) -> str:
    """The struct format letter of an integer field (`_runs` groups only those)."""
    integer = _integer(sc)
    if integer is None:
        raise TypeError(f"field {sc.name!r} is not an integer")
    return integer.fmtstr[1:]


def _is_error(sc: Construct) -> bool:
    return type(sc.subcon if isinstance(sc, Renamed) else sc) is ErrorFieldType


def _rebuilt(sc: Construct) -> Rebuild | None:
    inner = sc.subcon if isinstance(sc, Renamed) else sc
    return inner if isinstance(inner, Rebuild) else None


def _runs(subcons: list[Construct]) -> list:
    """The fields in order, consecutive integers grouped in lists: the compiled code
    reads (or writes) each group with one struct, as a hand-written codec would."""
    out: list = []
    for sc in subcons:
        if _integer(sc) is None:
            out.append(sc)
        elif out and isinstance(out[-1], list):
            out[-1].append(sc)
        else:
            out.append([sc])
    return out


def _run_struct(code: Any, run: list[Construct]) -> str:
    fmt = ">" + "".join(_integer_format(sc) for sc in run)
    name = f"run_{fmt[1:]}"
    code.append(f"{name} = struct.Struct({fmt!r})")
    return name


def _emit_parse_run(code: Any, run: list[Construct]) -> list[str]:
    names = ", ".join(f"this[{sc.name!r}]" for sc in run)
    st = _run_struct(code, run)
    lines = [f"({names},) = {st}.unpack(io.read({st}.size))"]
    for sc in run:
        if _is_error(sc):
            code.append(_IMPORTS)
            lines.append(f"this[{sc.name!r}] = as_error_code(this[{sc.name!r}])")
    return lines


def _emit_build_run(code: Any, run: list[Construct]) -> list[str]:
    lines = []
    for sc in run:
        rebuilt = _rebuilt(sc)
        if rebuilt is not None:  # a count or size: computed from the fields it describes
            code.append(_IMPORTS)
            lines.append(f"this[{sc.name!r}] = {rebuilt.func!r}")
    names = ", ".join(f"this[{sc.name!r}]" for sc in run)
    lines.append(f"io.write({_run_struct(code, run)}.pack({names}))")
    return lines


class Tagged(Construct):
    """An int16 tag, then the layout `cases[tag]`; an unknown tag is an error."""

    TAG = FormatField(">", "h")

    def __init__(self, what: str, cases: Mapping[Tag, Construct]) -> None:
        super().__init__()
        self.what = what
        self.cases = {int(tag): layout for tag, layout in cases.items()}

    def _parse(self, stream: Any, context: Any, path: Any) -> Any:
        tag = self.TAG._parse(stream, context, path)
        layout = self.cases.get(tag)
        if layout is None:
            raise StreamError(f"unknown {self.what} {tag}")
        return layout._parse(stream, context, path)

    def _emitparse(self, code: Any) -> str:
        n = code.allocateId()
        cases = f"tagged_cases_{n}"
        code.append(f"{cases} = {{}}")
        for tag, layout in self.cases.items():
            code.append(f"{cases}[{tag}] = lambda io, this: {layout._compileparse(code)}")
        code.append(f"""
            def tagged_unknown_{n}(tag):
                def fail(io, this):
                    raise StreamError(f"unknown {self.what} {{tag}}")
                return fail
            def parse_tagged_{n}(io, this):
                tag = {self.TAG._compileparse(code)}
                return {cases}.get(tag) or tagged_unknown_{n}(tag)
        """)
        return f"parse_tagged_{n}(io, this)(io, this)"
