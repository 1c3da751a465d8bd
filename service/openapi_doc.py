"""Write (or check) the committed OpenAPI document ``openapi/openapi.json``.

    python -m service.openapi_doc          # regenerate after changing an endpoint
    python -m service.openapi_doc --check  # exit 1 when the committed file is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from service.config import REPO_ROOT, Settings

DOC_PATH = REPO_ROOT / "openapi" / "openapi.json"


def render() -> str:
    """The document as committed: stable key order, two-space indent, trailing newline."""
    from service.main import create_app

    app = create_app(Settings(environment="development"))
    return json.dumps(app.openapi(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--path", type=Path, default=DOC_PATH)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.path.read_text(encoding="utf-8") if args.path.exists() else ""
        if current != text:
            print(f"{args.path} is stale: run `python -m service.openapi_doc`", file=sys.stderr)
            return 1
        return 0
    args.path.parent.mkdir(parents=True, exist_ok=True)
    args.path.write_text(text, encoding="utf-8")
    print(f"wrote {args.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
