"""Turn Dynamo's guard text into checks a person reads, grouped by the variable they guard.

Input is what `_torch.guard_tree(entry)` returns (plain dicts and strings), so this module needs no
torch and is easy to test on recorded text.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from dynascope.artifacts.explanation import Guard, GuardGroup, UserLine
from dynascope.userframes import is_library_file

GLOBAL_STATE = "global state"

# --- source expressions ---------------------------------------------------------------------------

_SUBS = [
    (re.compile(r"\._modules\['(\d+)'\]"), r"[\1]"),
    (re.compile(r"\._modules\['([A-Za-z_]\w*)'\]"), r".\1"),
    (re.compile(r"\._(?:parameters|buffers)\['([A-Za-z_]\w*)'\]"), r".\1"),
    (re.compile(r"\bL\['([A-Za-z_]\w*)'\]"), r"\1"),
    (re.compile(r"\bG\['([A-Za-z_]\w*)'\]"), r"\1"),
    (re.compile(r"\bL\[\"([A-Za-z_]\w*)\"\]"), r"\1"),
    (re.compile(r"\bG\[\"([A-Za-z_]\w*)\"\]"), r"\1"),
]


_IMPORT = re.compile(r"\bG\['__import_(\w+?)'\]")
_BUILTINS = re.compile(r"\bG\['__builtins_dict___\d+'\]\['(\w+)'\]")
_DICT_CONTAINS = re.compile(r"^(?P<neg>not )?___dict_contains\((?P<key>'[^']*'|\"[^\"]*\"), (?P<d>.+)\)$")


def readable_source(expr: str) -> str:
    """L['self']._modules['layers']._modules['0']._parameters['weight'] -> self.layers[0].weight."""
    out = expr
    out = _BUILTINS.sub(lambda m: m.group(1), out)
    out = _IMPORT.sub(lambda m: m.group(1).replace("_dot_", "."), out)
    for pattern, repl in _SUBS:
        out = pattern.sub(repl, out)
    return out.replace("___odict_getitem(", "getitem(")


# --- one guard ------------------------------------------------------------------------------------

_TENSOR = re.compile(
    r"check_tensor\((?P<src>.+?), (?P<cls>[\w.]+), DispatchKeySet\((?P<keys>[^)]*)\), (?P<dtype>torch\.\w+), "
    r"device=(?P<dev>[^,]+), requires_grad=(?P<rg>\w+), size=(?P<size>\[[^\]]*\]), stride=(?P<stride>\[[^\]]*\])\)"
)
# the object's type as `type=<class 'module'>` (2.13 .. 2.15), or the object's repr (2.9 .. 2.12:
# `type=<module 'torch' from '...'>`, `type=Linear(in_features=...)`), whose leading name is its kind
_OBJ_ID = re.compile(
    r"___check_obj_id\((?P<src>.+?), (?P<id>-?\d+)\)(?:, type=(?:<class '(?P<type>[^']+)'>|<?(?P<kind>\w+).*))?$", re.S
)
_TYPE_ID = re.compile(r"___check_type_id\((?P<src>.+), (?P<id>-?\d+)\)(?:, type=<class '(?P<type>[^']+)'>)?$")
_AGAINST = re.compile(r"^(?P<what>.+?) against (?P<json>\{.*\})$", re.S)
_ALIAS = re.compile(r"^check_no_aliasing\((?P<args>.*)\)$")
_HASATTR = re.compile(r"^hasattr\((?P<src>.+), '(?P<attr>\w+)'\) == (?P<val>True|False)$")
_DICT_KEY = re.compile(r"^list\(dict\.keys\((?P<d>.+)\)\)\[(?P<i>\d+)\] == (?P<k>.+)$")
_LEN = re.compile(r"^len\((?P<src>.+)\) == (?P<n>\d+)$")
_DEFAULT_DTYPES = {5: "float16", 6: "float32", 7: "float64", 15: "bfloat16"}


def _strip_comment(part: str) -> tuple[str, str | None, str | None]:
    """'check  # user code  # file:line in fn' -> (check, user code, 'file:line in fn')."""
    pieces = re.split(r"\s{2,}# ", part)
    check = pieces[0].strip()
    code = where = None
    if len(pieces) >= 3:
        code, where = pieces[-2].strip(), pieces[-1].strip()
    elif len(pieces) == 2:
        if re.search(r":\d+ in \S+$", pieces[1]):
            where = pieces[1].strip()
        else:
            code = pieces[1].strip()
    return check, code, where


def user_line_of(check: str, user_file: str | None) -> UserLine | None:
    """The user line a guard check text carries in its comment ('n == 2  # y = x * n  # m.py:4 in f')."""
    _check, code, where = _strip_comment(check)
    return _user_line(code, where, user_file)


def _user_line(code: str | None, where: str | None, user_file: str | None) -> UserLine | None:
    if where is None:
        return None
    # the first "file:line in fn": a shape guard's comment goes on to say where torch itself specialised
    m = re.match(r"(?P<file>.+?):(?P<line>\d+) in (?P<fn>\S+)", where)
    if not m:
        return None
    file = m.group("file")
    if "_dynamo/" in file.replace(os.sep, "/"):
        return None  # a guard torch adds itself (ambient state), not from a user line
    # torch shortens the path; it is the user's file when the real path ends with it. Otherwise the
    # guard came from code the function called (a library), and keeps torch's short path.
    if user_file and user_file.endswith(file):
        file = user_file
    return UserLine(file=file, line=int(m.group("line")), code=code)


def _global_state_text(blob: str) -> str:
    try:
        state = json.loads(blob)
    except ValueError:
        return "torch global state is unchanged"
    bits = []
    if "grad_mode" in state:
        bits.append(f"grad_mode={bool(state['grad_mode'])}")
    if "default_dtype" in state:
        bits.append(f"default dtype {_DEFAULT_DTYPES.get(state['default_dtype'], state['default_dtype'])}")
    if "num_threads" in state:
        bits.append(f"num_threads={state['num_threads']}")
    if "deterministic_algorithms" in state:
        bits.append(f"deterministic_algorithms={bool(state['deterministic_algorithms'])}")
    auto = state.get("autocast_state", {})
    if isinstance(auto, dict) and "enabled" in auto:
        bits.append("autocast " + ("on" if any(auto.get("enabled") or []) else "off"))
    if "allow_tf32" in state:
        bits.append(f"allow_tf32={bool(state['allow_tf32'])}")
    if "torch_function" in state:
        bits.append(f"torch_function={'enabled' if state['torch_function'] else 'disabled'}")
    return "torch global state is as at compile time: " + ", ".join(bits)


def readable_check(kind: str, check: str) -> str:
    """One guard's raw check text -> one readable line."""
    check = re.sub(r"\s*\(HINT: [^)]*\)\s*$", "", check)
    m = _TENSOR.search(check)
    if m:
        src = readable_source(m.group("src"))
        dtype = m.group("dtype").replace("torch.", "")
        size = m.group("size").replace("None", "any")
        stride = m.group("stride").replace("None", "any")
        dev = m.group("dev").strip()
        keys = m.group("keys")
        device = "cuda" if "CUDA" in keys else ("cpu" if "CPU" in keys else None)
        if dev not in ("None", ""):
            device = f"cuda:{dev}" if dev.isdigit() else dev
        text = f"{src}: {m.group('cls')}, dtype {dtype}, shape {size}, stride {stride}, requires_grad={m.group('rg')}"
        if device:
            text += f", device {device}"
        return text
    m = _OBJ_ID.match(check)
    if m:
        kind = m.group("type") or m.group("kind")
        what = f" ({kind})" if kind else ""
        return f"{readable_source(m.group('src'))} is the same object as at compile time{what}"
    m = _TYPE_ID.match(check)
    if m:
        t = m.group("type") or "the type seen at compile time"
        return f"type({readable_source(m.group('src'))}) is {t}"
    m = _AGAINST.match(check)
    if m:
        if "___check_global_state" in m.group("what"):
            return _global_state_text(m.group("json"))
        return f"{readable_source(m.group('what'))} matches {m.group('json')}"
    if check.startswith("___check_global_state()"):  # torch 2.5.x does not print the state it compares
        return "torch global state (grad mode, default dtype, autocast, ...) is as at compile time"
    if check.startswith("___check_torch_function_mode_stack"):
        return "the torch function mode stack is as at compile time"
    if check.startswith("utils_device.CURRENT_DEVICE"):
        value = check.split("==", 1)[-1].strip()
        return f"default device (torch.set_default_device) is {value}"
    if "top_saved_tensors_hooks" in check:
        return "no saved-tensors hooks are active (as at compile time)"
    m = _ALIAS.match(check)
    if m:
        names = [readable_source(a.strip()) for a in m.group("args").split(",")]
        return f"{', '.join(names[:-1])} and {names[-1]} are different tensors (no aliasing)" if len(names) > 1 \
            else f"{names[0]} does not alias another input"
    m = _HASATTR.match(check)
    if m:
        has = "has" if m.group("val") == "True" else "has no"
        return f"{readable_source(m.group('src'))} {has} attribute {m.group('attr')}"
    m = _DICT_KEY.match(check)
    if m:
        return f"key #{m.group('i')} of {readable_source(m.group('d'))} is {m.group('k')}"
    m = _DICT_CONTAINS.match(check)
    if m:
        rel = "not in" if m.group("neg") else "in"
        return f"{m.group('key')} {rel} {readable_source(m.group('d'))}"
    m = _LEN.match(check)
    if m:
        return f"len({readable_source(m.group('src'))}) == {m.group('n')}"
    return re.sub(r", type=<class '([^']+)'>$", r"  (\1)", readable_source(check))


# --- the tree -------------------------------------------------------------------------------------

_MARKER_KIND = "DIMENSION_DYNAMIC_MARKING_GUARD"
_ROOT = re.compile(r"G\['__builtins_dict___\d+'\]\['[^']+'\]|[LG]\['[^']+'\]")
_GLOBAL_KINDS = {"GLOBAL_STATE", "TORCH_FUNCTION_MODE_STACK", "DEFAULT_DEVICE", "GRAD_MODE",
                 "DETERMINISTIC_ALGORITHMS", "DUAL_LEVEL", "FUNCTORCH_STACK_MATCH", "AUTOGRAD_SAVED_TENSORS_HOOKS"}


def group_guards(tree: list[dict[str, Any]], user_file: str | None = None) -> tuple[list[GuardGroup], int]:
    """guard_tree() rows -> (groups by subject, number of raw leaf checks)."""
    groups: dict[str, GuardGroup] = {}
    order: list[str] = []
    raw_count = 0

    def group_for(subject: str, source: str | None) -> GuardGroup:
        root = _ROOT.search(source or "")
        if root is not None:  # one group per variable: self.lin.weight's checks go under self
            source = root.group(0)
            subject = readable_source(source)
        if subject not in groups:
            groups[subject] = GuardGroup(subject=subject, source=source)
            order.append(subject)
        return groups[subject]

    group_for(GLOBAL_STATE, None)
    for node in tree:
        source = node.get("source")
        for leaf in node.get("guards", []):
            kind = leaf.get("kind") or "GUARD"
            parts = leaf.get("parts") or []
            raw_count += max(1, len(parts))
            if not parts:
                continue
            if kind == _MARKER_KIND:
                check, code, where = _strip_comment(parts[0])
                m = _HASATTR.match(check)
                src = m.group("src") if m else (source or "?")
                subject = readable_source(src)
                g = Guard(kind=kind, text=f"{subject} has no dynamic-shape markings (mark_dynamic & co.)",
                          raw="; ".join(_strip_comment(p)[0] for p in parts),
                          user_line=_user_line(code, where, user_file), fail_count=leaf.get("fail_count"))
                group_for(subject, src).guards.append(g)
                continue
            for part in parts:
                check, code, where = _strip_comment(part)
                text = readable_check(kind, check)
                if source is None or source in ("L", "G"):
                    # root-level leaf: ambient state, or a relational/shape guard naming its variables
                    ref = re.search(r"\b[LG]\['([A-Za-z_]\w*)'\]", check)
                    if kind in _GLOBAL_KINDS or ref is None or (kind == "LAMBDA_GUARD" and "top_saved" in check):
                        subject, src = GLOBAL_STATE, None
                    else:
                        subject, src = ref.group(1), ref.group(0)
                else:
                    subject, src = readable_source(source), source
                g = Guard(kind=kind, text=text, raw=check, user_line=_user_line(code, where, user_file),
                          fail_count=leaf.get("fail_count"))
                group_for(subject, src).guards.append(g)
    def rank(subject: str) -> int:  # global state, then locals (arguments), then globals
        if subject == GLOBAL_STATE:
            return 0
        return 1 if (groups[subject].source or "").startswith("L[") else 2

    result = sorted((groups[s] for s in order if groups[s].guards), key=lambda g: rank(g.subject))
    return result, raw_count


def group_flat(code_parts: list[str], user_file: str | None = None) -> tuple[list[GuardGroup], int]:
    """Fallback when the guard tree is unavailable: the flat code_parts list."""
    rows = [{"source": None, "guards": [{"kind": "GUARD", "parts": [p], "fail_count": None}]} for p in code_parts]
    return group_guards(rows, user_file)


# ------------------------------------------------------------------------------------------------
# the user's line behind a guard torch names a library line for

_FX_WHERE = re.compile(r"^#\s*File:\s*(?P<file>.+?):(?P<line>\d+) in (?P<fn>[^,]+), code: (?P<code>.*)$")
_FX_ALIAS = re.compile(r"^(?P<local>[A-Za-z_]\w*) = (?P<input>[LG]_\w+)$")
_FX_NAME = re.compile(r"\b[A-Za-z_]\w*\b")


def first_uses(fx_code: str) -> dict[str, tuple[str, int, str]]:
    """Each graph input of a Dynamo graph's readable code (`L_x_`) -> the user line of the first op that
    reads it: the `# File: path:LINE in fn, code: ...` comment above that op (Dynamo's stack trace of the
    node, torch.nn's own frames left out)."""
    alias: dict[str, str] = {}
    out: dict[str, tuple[str, int, str]] = {}
    where: tuple[str, int, str] | None = None
    for raw in fx_code.splitlines():
        text = raw.strip()
        m = _FX_WHERE.match(text)
        if m:
            where = (m.group("file"), int(m.group("line")), m.group("code").strip())
            continue
        if text.startswith("#"):  # "# No stacktrace found for following nodes"
            where = None
            continue
        a = _FX_ALIAS.match(text)
        if a:
            alias[a.group("local")] = a.group("input")
            continue
        if where is None or " = " not in text:
            continue
        for name in _FX_NAME.findall(text.split(" = ", 1)[1]):
            if name in alias:
                out.setdefault(alias[name], where)
    return out


def charge_to_user_frames(groups: list[GuardGroup], fx_codes: list[str]) -> None:
    """Where torch names a library's line for a guard (torch.nn's `return F.conv2d(` for an input's
    shape), name the user's line that led there instead, keeping the library line beside it: the line of
    the first op of the cache entry's graphs that reads the guarded input (userframes.py)."""
    uses: dict[str, tuple[str, int, str]] = {}
    for code in fx_codes:
        for name, first in first_uses(code).items():
            uses.setdefault(name, first)
    if not uses:
        return
    for group in groups:
        for g in group.guards:
            ul = g.user_line
            if ul is None or ul.library_file is not None or not is_library_file(ul.file):
                continue
            m = _SOURCE.search(g.raw or "")
            where = _first_use(uses, m.group(0) if m else group.source)
            if where is None or is_library_file(where[0]):
                continue
            g.user_line = UserLine(file=where[0], line=where[1], code=where[2] or None, library_file=ul.file,
                                   library_line=ul.line, library_code=ul.code)


_SOURCE = re.compile(r"[LG]\[[^\]]+\](?:\.\w+|\[[^\]]+\])*")


def _first_use(uses: dict[str, tuple[str, int, str]], source: str | None) -> tuple[str, int, str] | None:
    """The first use of the graph input Dynamo made of `source` ("L['x']" is `L_x_`); of a module
    ("L['self']._modules['fc']"), the first use of any of its parameters and buffers."""
    parts = re.findall(r"^[LG]\[[^\]]+\]|\.\w+|\[[^\]]+\]", source or "")
    while parts:  # L['x'].size()[0] is a check on x: the longest prefix that names an input, or one's owner
        name = re.sub(r"[^A-Za-z0-9]+", "_", "".join(parts))
        where = uses.get(name) or next((w for n, w in uses.items() if n.startswith(name)), None)
        if where is not None:
            return where
        parts.pop()
    return None
