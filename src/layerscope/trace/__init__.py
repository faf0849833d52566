"""layerscope.trace"""
