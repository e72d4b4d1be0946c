"""Long real texts that are available offline, with their provenance.

Two built-in sources plus any UTF-8 file:

- ``kjv``: the King James Bible as printed by Debian's ``bible`` program (packages
  ``bible-kjv`` and ``bible-kjv-text``; ``sudo apt-get install bible-kjv``). The text is the
  output of ``bible -f off gen1:1-rev22:21`` (one verse per line, ``Ge1:1 In the beginning...``)
  from the line starting ``Ge1:1 `` on: the program first prints one random "verse of the day",
  which is dropped. With bible-kjv 4.38 this is 4,404,412 bytes, sha256 ``cd45f0c9...9f47229d``.
  Public domain (the Debian copyright file: the copyright "is expired since the translation was
  done in 1611"; in the United Kingdom the Crown's letters patent still govern printing).
- ``stdlib``: the source of the running interpreter's standard library,
  ``sorted(glob("**/*.py"))`` under ``sysconfig.get_paths()["stdlib"]``, skipping files under any
  ``test``, ``tests`` or ``site-packages`` directory, the files' bytes concatenated without
  separators. It depends on the exact Python build (CPython 3.11.7 gives 799 files, 12,602,225
  bytes). PSF License Agreement.
- ``file:PATH``: any UTF-8 text file, used as is.
"""

from __future__ import annotations

import hashlib
import logging
import platform
import shutil
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Text", "load_text", "kjv_text", "stdlib_text", "file_text"]

log = logging.getLogger(__name__)

KJV_RANGE = "gen1:1-rev22:21"
KJV_FIRST_LINE = "Ge1:1 "
STDLIB_SKIP_DIRS = frozenset({"test", "tests", "site-packages"})


@dataclass(frozen=True)
class Text:
    """A text and where it came from.

    Attributes:
        name: short name (``kjv``, ``stdlib`` or the file's stem).
        text: the whole text (str).
        source: how it was obtained, one line.
        licence: the text's licence, one line.
        sha256: hex sha256 of ``text`` encoded as UTF-8.
    """

    name: str
    text: str
    source: str
    licence: str
    sha256: str


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _dpkg_version(package: str) -> str:
    """Installed Debian version of ``package``, or ``"unknown"``."""
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", package],
            check=True,
            capture_output=True,
            text=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def kjv_text(bible_program: str = "bible") -> Text:
    """The King James Bible from Debian's ``bible`` program (see the module docstring).

    Args:
        bible_program: name or path of the ``bible`` executable.

    Returns:
        The :class:`Text`, starting at ``Ge1:1 In the beginning``.

    Raises:
        FileNotFoundError: ``bible`` is not installed (``apt-get install bible-kjv``).
        RuntimeError: its output has no ``Ge1:1`` line.
    """
    exe = shutil.which(bible_program)
    if exe is None:
        raise FileNotFoundError(
            f"{bible_program!r} not found; install the Debian packages bible-kjv and "
            "bible-kjv-text (sudo apt-get install bible-kjv), or pass the text as file:PATH"
        )
    out = subprocess.run([exe, "-f", "off", KJV_RANGE], check=True, capture_output=True).stdout
    text = out.decode("utf-8")
    start = text.find(KJV_FIRST_LINE)
    if start < 0 or (start > 0 and text[start - 1] != "\n"):
        raise RuntimeError("the bible program printed no line starting with 'Ge1:1 '")
    text = text[start:]
    versions = f"bible-kjv {_dpkg_version('bible-kjv')}, bible-kjv-text "
    versions += _dpkg_version("bible-kjv-text")
    return Text(
        name="kjv",
        text=text,
        source=f"King James Bible, Debian {versions}: `bible -f off {KJV_RANGE}` from the first "
        "'Ge1:1 ' line (the random verse printed first is dropped)",
        licence="public domain (Debian bible-kjv copyright file; UK: Crown letters patent)",
        sha256=_sha256(text.encode("utf-8")),
    )


def stdlib_text(stdlib_dir: str | Path | None = None) -> Text:
    """The running interpreter's standard-library source (see the module docstring).

    Args:
        stdlib_dir: directory to read instead of ``sysconfig.get_paths()["stdlib"]``.

    Returns:
        The :class:`Text`; bytes that are not UTF-8 are decoded with replacement characters.

    Raises:
        FileNotFoundError: the directory holds no ``.py`` file.
    """
    root = Path(stdlib_dir or sysconfig.get_paths()["stdlib"])
    files = []
    for rel in sorted(str(p.relative_to(root)) for p in root.glob("**/*.py")):
        if STDLIB_SKIP_DIRS.intersection(Path(rel).parts[:-1]):
            continue
        files.append(rel)
    if not files:
        raise FileNotFoundError(f"no .py files under {root}")
    data = b"".join((root / rel).read_bytes() for rel in files)
    text = data.decode("utf-8", errors="replace")
    impl = f"{platform.python_implementation()} {platform.python_version()}"
    log.info("stdlib text: %d files, %d bytes from %s", len(files), len(data), root)
    return Text(
        name="stdlib",
        text=text,
        source=f"{impl} standard library source under {root}: sorted(glob('**/*.py')) without "
        f"test/, tests/, site-packages/ ({len(files)} files, {len(data)} bytes, concatenated)",
        licence="PSF License Agreement (Python Software Foundation License)",
        sha256=_sha256(text.encode("utf-8")),
    )


def file_text(path: str | Path) -> Text:
    """Any UTF-8 text file, used whole.

    Args:
        path: the file.

    Returns:
        The :class:`Text` (licence ``"unknown (user-supplied file)"``: state it yourself).

    Raises:
        FileNotFoundError: no such file.
        UnicodeDecodeError: not UTF-8.
    """
    path = Path(path)
    text = path.read_bytes().decode("utf-8")
    return Text(
        name=path.stem,
        text=text,
        source=f"user-supplied file {path.name}",
        licence="unknown (user-supplied file)",
        sha256=_sha256(text.encode("utf-8")),
    )


def load_text(spec: str) -> Text:
    """Resolve a text spec: ``kjv``, ``stdlib`` or ``file:PATH``.

    Raises:
        ValueError: an unknown spec.
    """
    if spec == "kjv":
        return kjv_text()
    if spec == "stdlib":
        return stdlib_text()
    if spec.startswith("file:"):
        return file_text(spec[len("file:") :])
    raise ValueError(f"unknown text {spec!r}; use kjv, stdlib or file:PATH")
