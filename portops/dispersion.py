"""placeholder"""
class Dispersion:
    pass
