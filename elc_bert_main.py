"""The `elc-bert` console script: the arguments are parsed by `elc_bert_cli`, which imports nothing of the package,
so that `--help`, `--version` and a usage error answer at once; only a command that parsed imports the package
(torch, the Auto classes: seconds) and runs in `elc_bert.cli`. This module alone imports both halves, so that the
arrow between them points one way: `elc_bert.cli` imports the parser, the parser nothing of it.
"""

from elc_bert_cli import build_parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    from elc_bert.cli import execute

    execute(args)


if __name__ == "__main__":
    main()
