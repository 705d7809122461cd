"""trainscope: the pip-installed package's locator for its bundled command and libraries.

The package holds the same tree `cmake --install` gives: bin/trainscope, lib/libtrainscope.so,
lib/libtrainscope-engine.so and the engine's own shared libraries in lib/. The `trainscope` console script (and
`python -m trainscope`) runs bin/trainscope with the same arguments and exit status.
"""

import os

__all__ = ["command_path", "library_dir", "main"]

_HERE = os.path.dirname(os.path.abspath(__file__))


def command_path():
    """The bundled `trainscope` command."""
    return os.path.join(_HERE, "bin", "trainscope")


def library_dir():
    """The directory holding libtrainscope.so, the engine and the libraries bundled with it."""
    return os.path.join(_HERE, "lib")


def main():
    """Replaces this process with the bundled command: same argv, same exit status, same signals."""
    import sys

    path = command_path()
    try:
        os.execv(path, ["trainscope"] + sys.argv[1:])
    except OSError as error:
        sys.stderr.write("trainscope: cannot run the bundled command %s: %s\n" % (path, error))
        return 127
