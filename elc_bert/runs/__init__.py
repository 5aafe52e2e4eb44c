"""The run folder: what each job (`elc-bert pretrain`, `mlm`, `finetune-ner`, `finetune-glue`) writes into its
`output_dir`, and the rules for resuming one, sharing one between processes and telling whose it is. The jobs write
through these names and the readers (export and its model card, the scorecard, the scripts) read through them.

    <job>_config.yaml           the job's resolved config (`config_file`); it also says which job made the folder
    metrics.json                pretrain, mlm: {"final": {...}, "log_history": [...]}
    results.json, results.md    finetune-ner, finetune-glue: the summary over trials or tasks
    n<N>/trial<t>/              finetune-ner, one trial: result.json, model/ (kept best model), .claimed (its claim)
    glue/                       finetune-glue's own run folder inside the model's run: <task>/result.json, <task>/model/
    tokenizer/                  pretrain: the tokenizer it trained
    checkpoint-<step>/          the Trainer's checkpoints; each is also a model with its tokenizer
    .writer.lock, .writer       pretrain, mlm, finetune-glue: the lock of the one process writing the folder, and who
    words-<W>/                  pretrain: the model after W words of training samples (`checkpoint_words`)
    model_fingerprints.jsonl    the sha256 of each model the run saved to publish, so that its metrics go only onto
                                the card of a model it made

    .starting.lock              finetune-ner: held while a process checks the config and claims its first trial;
                                removed when the run ends
    .saving/                    pretrain, finetune-ner: a final model being saved, moved into place when whole

One module per question: `layout` (names, which job made a folder, what counts as work), `saved` (checkpoints and
whether they are whole, files and folders written whole, full disks), `writers` (the writer lock, shared starts,
trial claims), `fingerprints` (which models a run made). What a model name stands for and where its tokenizer is are
`pretrained`'s. They import only `models.loading` from the rest of the package, so that every layer may import them.
"""

# The names the jobs and readers use, from the module that owns each.
from .fingerprints import fingerprint, record_model, recorded_models  # noqa: F401
from .layout import (  # noqa: F401
    ADAPTER,
    CLAIM,
    CONFIG_FILE_SUFFIX,
    EVAL,
    EVAL_LOSS_PLOT,
    F1_VS_N_PLOT,
    LOSS_PLOT,
    METRICS,
    MODEL,
    MODEL_FINGERPRINTS,
    PIPELINE_FINETUNE,
    PIPELINE_PREDICTIONS,
    PIPELINE_ZERO_SHOT,
    RESULT,
    RESULTS,
    RESULTS_TABLE,
    SAVING,
    TOKENIZER,
    TRAINER_STATE,
    WORDS_CHECKPOINT,
    WORDS_SEEN,
    WRITER,
    config_file,
    glue_dir,
    has_work,
    links_out_of,
    pipeline_model_dir,
    trial_dir,
)
from .saved import (  # noqa: F401
    DISK_FULL_ERRNOS,
    checkpoints,
    last_checkpoint,
    naming_full_disk,
    replace_file,
    replacing_files,
    replacing_folder,
)
from .writers import claim, hold_run_folder, holder, remove_starting_lock, starting_trials  # noqa: F401
