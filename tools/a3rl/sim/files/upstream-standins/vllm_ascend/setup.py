# STAND-IN made by a3rl's simulator for vllm-ascend v0.14.0rc1: setup.py
from setuptools import find_packages, setup

setup(name="vllm_ascend", version="0.14.0rc1", packages=find_packages())
