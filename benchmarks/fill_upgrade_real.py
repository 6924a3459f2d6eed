"""Fill a scratch corpus of ``benchmarks/upgrade_real/`` from repository snapshots already on this machine.

Each manifest row names a repository, a commit, a path and the git blob id of the file's bytes. For every row whose
repository has a snapshot under ``--mirrors`` (the search tool's ``fetch`` puts one at
``MIRRORS/<owner>+<name>/``), the file is taken with ``git show <commit>:<path>``, its blob id checked, and written to
``CORPUS/files/<id>__<owner>__<repo>__<path with / as __>``, the name ``bench_upgrade_real`` reads. Rows already
present with the right blob are left alone; rows whose repository has no snapshot are listed as missing.

    python -m benchmarks.fill_upgrade_real --manifest benchmarks/upgrade_real/holdout4.tsv \\
        --corpus /work/scratch/upgrade_holdout4 [--mirrors /work/.mirror] [--repo owner/name]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import subprocess
from pathlib import Path


def blob_id(data: bytes) -> str:
    """The git blob id of ``data`` (what ``git hash-object`` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def corpus_name(row: dict[str, str]) -> str:
    """The scratch file name of one manifest row."""
    owner, name = row["repo"].split("/", 1)
    return "__".join([row["id"], owner, name, row["path"].replace("/", "__")])


def git_dir(mirrors: Path, repo: str) -> Path | None:
    """The git directory of ``repo``'s snapshot under ``mirrors``, or None when it has none."""
    root = mirrors / repo.replace("/", "+")
    # A snapshot comes bare (``repo/HEAD``) or as a checkout (``repo/.git/HEAD``).
    for candidate in (root / "repo", root / "repo" / ".git", root, root / ".git"):
        if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
            return candidate
    return None


def fill(manifest: Path, corpus: Path, mirrors: Path, only_repo: str | None = None) -> dict[str, list[str]]:
    """Write every row of ``manifest`` that a snapshot can give; return the ids by outcome."""
    out = corpus / "files"
    out.mkdir(parents=True, exist_ok=True)
    outcome: dict[str, list[str]] = {
        "present": [],
        "written": [],
        "no snapshot": [],
        "not in snapshot": [],
        "blob differs": [],
    }
    with manifest.open(newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    for row in rows:
        if only_repo and row["repo"] != only_repo:
            continue
        target = out / corpus_name(row)
        if target.is_file() and blob_id(target.read_bytes()) == row["blob"]:
            outcome["present"].append(row["id"])
            continue
        where = git_dir(mirrors, row["repo"])
        if where is None:
            outcome["no snapshot"].append(row["id"])
            continue
        shown = subprocess.run(
            ["git", "--git-dir", str(where), "show", f"{row['commit']}:{row['path']}"], capture_output=True, check=False
        )
        if shown.returncode != 0:
            # The snapshot may lack that commit but still hold the blob itself.
            shown = subprocess.run(
                ["git", "--git-dir", str(where), "cat-file", "blob", row["blob"]], capture_output=True, check=False
            )
        if shown.returncode != 0:
            outcome["not in snapshot"].append(row["id"])
            continue
        if blob_id(shown.stdout) != row["blob"]:
            outcome["blob differs"].append(row["id"])
            continue
        target.write_bytes(shown.stdout)
        outcome["written"].append(row["id"])
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"))
    parser.add_argument("--repo", help="only this repository's rows (owner/name)")
    args = parser.parse_args()
    outcome = fill(args.manifest, args.corpus, args.mirrors, args.repo)
    for what, ids in outcome.items():
        if ids:
            shown = " ".join(ids) if what != "present" and what != "written" else ""
            print(f"{what}: {len(ids)} {shown}".rstrip())  # noqa: T201 (a command's report)


if __name__ == "__main__":
    main()
