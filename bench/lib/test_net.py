import socket
import unittest

from .net import CLUSTER_BUS_OFFSET, HIGHEST_CLUSTER_PORT, free_cluster_port, free_port, free_ports


def bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as trial:
        try:
            trial.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


class FreePortsTest(unittest.TestCase):
    def test_ports_are_different_and_free(self):
        ports = free_ports(5)
        self.assertEqual(len(set(ports)), 5)
        self.assertTrue(all(bindable(port) for port in ports))

    def test_one_port(self):
        self.assertTrue(bindable(free_port()))

    def test_cluster_port_leaves_its_bus_port_free(self):
        port = free_cluster_port()
        self.assertLessEqual(port, HIGHEST_CLUSTER_PORT)
        self.assertTrue(bindable(port))
        self.assertTrue(bindable(port + CLUSTER_BUS_OFFSET))


if __name__ == "__main__":
    unittest.main()
