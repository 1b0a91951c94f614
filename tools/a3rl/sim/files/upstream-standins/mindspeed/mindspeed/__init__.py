# STAND-IN made by a3rl's simulator for MindSpeed: package root
