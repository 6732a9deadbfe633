/* SPDX-License-Identifier: GPL-2.0-or-later */
/* vhost-pci-blk-pci: the PCI proxy of vhost-pci-blk (plus its (non-)transitional variants). */
/*
 * All functions here run in the main loop thread with the BQL held.
 */

#include "qemu/osdep.h"
#include "standard-headers/linux/virtio_pci.h"
#include "hw/virtio/virtio.h"
#include "hw/virtio/vhost-pci-blk.h"
#include "hw/pci/pci.h"
#include "hw/qdev-properties.h"
#include "qapi/error.h"
#include "qemu/module.h"
#include "hw/virtio/virtio-pci.h"
#include "qom/object.h"

#define TYPE_VHOST_PCI_BLK_PCI "vhost-pci-blk-pci-base"

typedef struct VHostPciBlkPCI {
    VirtIOPCIProxy parent_obj;
    VHostPciBlk vdev;
} VHostPciBlkPCI;

DECLARE_INSTANCE_CHECKER(VHostPciBlkPCI, VHOST_PCI_BLK_PCI,
                         TYPE_VHOST_PCI_BLK_PCI)

static Property vhost_pci_blk_pci_properties[] = {
    DEFINE_PROP_UINT32("class", VirtIOPCIProxy, class_code, 0),
    DEFINE_PROP_UINT32("vectors", VirtIOPCIProxy, nvectors,
                       DEV_NVECTORS_UNSPECIFIED),
    DEFINE_PROP_END_OF_LIST(),
};

static void vhost_pci_blk_pci_realize(VirtIOPCIProxy *vpci_dev, Error **errp)
{
    VHostPciBlkPCI *dev = VHOST_PCI_BLK_PCI(vpci_dev);

    /* Default: one queue per vCPU, one MSI-X vector per queue + config. */
    if (dev->vdev.num_queues == VHOST_PCI_BLK_AUTO_NUM_QUEUES) {
        dev->vdev.num_queues = virtio_pci_optimal_num_queues(0);
    }
    if (vpci_dev->nvectors == DEV_NVECTORS_UNSPECIFIED) {
        vpci_dev->nvectors = dev->vdev.num_queues + 1;
    }
    qdev_realize(DEVICE(&dev->vdev), BUS(&vpci_dev->bus), errp);
}

static void vhost_pci_blk_pci_class_init(ObjectClass *klass, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(klass);
    VirtioPCIClass *k = VIRTIO_PCI_CLASS(klass);
    PCIDeviceClass *pcidev_k = PCI_DEVICE_CLASS(klass);

    set_bit(DEVICE_CATEGORY_STORAGE, dc->categories);
    device_class_set_props(dc, vhost_pci_blk_pci_properties);
    k->realize = vhost_pci_blk_pci_realize;
    /* To the guest this is an ordinary virtio-blk PCI function. */
    pcidev_k->vendor_id = PCI_VENDOR_ID_REDHAT_QUMRANET;
    pcidev_k->device_id = PCI_DEVICE_ID_VIRTIO_BLOCK;
    pcidev_k->revision = VIRTIO_PCI_ABI_VERSION;
    pcidev_k->class_id = PCI_CLASS_STORAGE_SCSI;
}

static void vhost_pci_blk_pci_instance_init(Object *obj)
{
    VHostPciBlkPCI *dev = VHOST_PCI_BLK_PCI(obj);

    virtio_instance_init_common(obj, &dev->vdev, sizeof(dev->vdev),
                                TYPE_VHOST_PCI_BLK);
    object_property_add_alias(obj, "bootindex", OBJECT(&dev->vdev),
                              "bootindex");
}

static const VirtioPCIDeviceTypeInfo vhost_pci_blk_pci_info = {
    .base_name = TYPE_VHOST_PCI_BLK_PCI,
    .generic_name = "vhost-pci-blk-pci",
    .transitional_name = "vhost-pci-blk-pci-transitional",
    .non_transitional_name = "vhost-pci-blk-pci-non-transitional",
    .instance_size = sizeof(VHostPciBlkPCI),
    .instance_init = vhost_pci_blk_pci_instance_init,
    .class_init = vhost_pci_blk_pci_class_init,
};

static void vhost_pci_blk_pci_register(void)
{
    virtio_pci_types_register(&vhost_pci_blk_pci_info);
}

type_init(vhost_pci_blk_pci_register)
