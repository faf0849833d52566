"""layerscope.hardware"""
