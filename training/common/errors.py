class InputError(ValueError):
    """Bad user input (a file, an argument, an output folder), reported before any work is done.

    The message names the input, says what is wrong with it and what to do; the command-line
    scripts print it without a traceback and exit with status 2.
    """
