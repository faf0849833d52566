"""layerscope.analysis"""
