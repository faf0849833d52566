"""layerscope.capture"""
