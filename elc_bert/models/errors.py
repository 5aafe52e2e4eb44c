"""The package's one input-error type: what our own checks raise for input a user can fix (a config value, a data file
or line, an argument, a folder, a checkpoint that does not fit the model), as opposed to a failure of the code.

`InputError` is a `ValueError`, and its variants for files and packages are also the built-in error a caller would
catch (`FileNotFoundError`, ...), so that code catching those keeps working. The `elc-bert` command reports an
`InputError` in one line and exits 2; any other exception (also a `ValueError` raised inside torch or transformers)
is a failure: exit 1. It lives with the models (the lowest layer) so that every layer may import it and the
models' remote code carries it beside them.
"""


class InputError(ValueError):
    """A bad input that the message names (the file, line, field or argument) and the user can fix."""


class InputNotFoundError(InputError, FileNotFoundError):
    """An input file or folder that does not exist."""


class InputExistsError(InputError, FileExistsError):
    """An output that is already there, or a run folder that another process is writing."""


class InputNotADirectoryError(InputError, NotADirectoryError):
    """An input that should be a folder and is not."""


class InputPermissionError(InputError, PermissionError):
    """A credential the input needs and lacks (e.g. no Hugging Face token to push with)."""


class MissingPackageError(InputError, ModuleNotFoundError):
    """An optional package that the input asks for (a model alias's package, an extra) is not installed."""


__all__ = [
    "InputError",
    "InputNotFoundError",
    "InputExistsError",
    "InputNotADirectoryError",
    "InputPermissionError",
    "MissingPackageError",
]
