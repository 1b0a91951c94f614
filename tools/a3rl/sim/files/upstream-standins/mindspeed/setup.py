# STAND-IN made by a3rl's simulator for MindSpeed: setup.py
from setuptools import find_packages, setup

setup(name="mindspeed", version="0.12.1", packages=find_packages())
