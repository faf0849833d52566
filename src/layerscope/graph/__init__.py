"""layerscope.graph"""
