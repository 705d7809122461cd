"""vllm.logger of the stand-in: init_logger gives a standard logger with vLLM's warning_once/info_once added."""

import logging


class _Logger(logging.LoggerAdapter):
    def __init__(self, logger):
        super().__init__(logger, {})
        self._said = set()

    def _once(self, method, msg, *args):
        if (msg, args) not in self._said:
            self._said.add((msg, args))
            method(msg, *args)

    def warning_once(self, msg, *args, **kwargs):
        self._once(self.warning, msg, *args)

    def info_once(self, msg, *args, **kwargs):
        self._once(self.info, msg, *args)

    def debug_once(self, msg, *args, **kwargs):
        self._once(self.debug, msg, *args)


def init_logger(name):
    return _Logger(logging.getLogger(name))
