"""The `elc-bert` command: `elc-bert <command> CONFIG [key=value ...]`."""

import argparse
import json

from .training.config import load_config


def main(argv=None):
    parser = argparse.ArgumentParser(prog="elc-bert", description="ELC-BERT, LTG-BERT and layer-fusion jobs.")
    commands = parser.add_subparsers(dest="command", required=True)
    pretrain_parser = commands.add_parser("pretrain", help="pretrain ELC-BERT or LTG-BERT from a YAML config")
    pretrain_parser.add_argument("config", help="YAML file (see configs/pretrain/)")
    pretrain_parser.add_argument("overrides", nargs="*", help="key=value, dotted keys for nested fields")
    ner_parser = commands.add_parser("finetune-ner", help="few-shot NER (CoNLL-03, WikiAnn) from a YAML config")
    ner_parser.add_argument("config", help="YAML file (see configs/ner/)")
    ner_parser.add_argument("overrides", nargs="*", help="key=value, dotted keys for nested fields")
    mlm_parser = commands.add_parser("mlm", help="MLM fine-tuning and perplexity on WikiText-2 from a YAML config")
    mlm_parser.add_argument("config", help="YAML file (see configs/mlm/)")
    mlm_parser.add_argument("overrides", nargs="*", help="key=value, dotted keys for nested fields")
    args = parser.parse_args(argv)

    if args.command == "pretrain":
        from .training.pretrain import PretrainConfig, pretrain

        metrics = pretrain(load_config(PretrainConfig, args.config, args.overrides))
        print(json.dumps(metrics, indent=2))
    elif args.command == "finetune-ner":
        from .training.finetune_ner import FinetuneNerConfig, finetune_ner

        finetune_ner(load_config(FinetuneNerConfig, args.config, args.overrides))
    elif args.command == "mlm":
        from .training.mlm import MlmConfig, mlm

        print(json.dumps(mlm(load_config(MlmConfig, args.config, args.overrides)), indent=2))


if __name__ == "__main__":
    main()
