"""Command line: render the model cards, or push a checkpoint with its card.

python -m hub_cards render [--method M ...] [--eval-json F] [--repo-id R] [--out DIR]
python -m hub_cards push --method M --repo OWNER/NAME --folder CKPT [--eval-json F] [--private] [--revision B]
"""

from __future__ import annotations

import argparse
import sys

from . import RENDERED_DIR, CardError, NoResultsError, card_methods, load_evaluations, push_to_hub, write_card


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hub_cards", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("render", help="render cards to Markdown files")
    r.add_argument("--method", action="append", help="method to render (repeatable; default: every method with facts)")
    r.add_argument("--eval-json", help="evaluator JSON (training/evaluate.py); methods it has no results for say 'no measured results yet'")
    r.add_argument("--repo-id", help="Hub repo the card is for (used in the loading snippet)")
    r.add_argument("--out", default=str(RENDERED_DIR), help=f"output folder (default {RENDERED_DIR})")

    u = sub.add_parser("push", help="upload a checkpoint folder with its card as README.md")
    u.add_argument("--method", required=True)
    u.add_argument("--repo", required=True, help="Hub repo id, owner/name")
    u.add_argument("--folder", required=True, help="checkpoint folder written by save_pretrained (has method.json)")
    u.add_argument("--eval-json")
    u.add_argument("--private", action="store_true")
    u.add_argument("--revision", help="branch to push to (created if missing)")
    u.add_argument("--commit-message")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "render":
            methods = args.method or card_methods()
            for method in methods:
                eval_json = args.eval_json
                if eval_json is not None and len(methods) > 1:
                    try:  # rendering all cards from one JSON: only methods it has results for get numbers
                        load_evaluations(eval_json, method)
                    except NoResultsError:
                        eval_json = None
                path = write_card(method, args.out, eval_json=eval_json, repo_id=args.repo_id)
                status = "measured results" if eval_json else "no measured results yet"
                print(f"{method}: {path} ({status})")
        else:
            url = push_to_hub(
                args.method,
                args.repo,
                args.folder,
                eval_json=args.eval_json,
                private=args.private,
                revision=args.revision,
                commit_message=args.commit_message,
            )
            print(url)
    except CardError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
