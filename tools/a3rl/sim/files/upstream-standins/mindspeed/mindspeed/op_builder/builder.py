# STAND-IN made by a3rl's simulator for MindSpeed: JIT op builder
from abc import ABC


class MindSpeedOpBuilder(ABC):
    def __init__(self, name):
        self.name = name

    def sources(self):
        return []

    def cxx_args(self):
        args = ['-fstack-protector-all', '-Wl,-z,relro,-z,now,-z,noexecstack', '-fPIC',
                '-pie', '-s', '-fvisibility=hidden', '-D_FORTIFY_SOURCE=2', '-O2']
        return args

    def extra_ldflags(self):
        return []
